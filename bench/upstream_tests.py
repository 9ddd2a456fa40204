"""Upstream's own tests, run on CPU against the released engine in kvfuzz's upstream cache: the
test command `kvfuzz mutate --also-run` is given (docs/mutate.md, "Upstream's own tests").

    python -m kvfuzz.bench.upstream_tests ROOT FILE... [--record] [pytest options]

ROOT is the release's extracted sdist (its `tests/` folder holds FILE, e.g.
`tests/v1/core/test_prefix_caching.py`, or a folder of them), or a repository's files with a
`test/` folder (SGLang's tests are in its repository only: `bench/upstream_sources.py` puts the
ones kvfuzz uses in `~/.cache/kvfuzz/sdist/sglang-0.5.23-tests`). What it takes to run them here:
- the released package comes from `kvfuzz upstream where` (PYTHONPATH, after whatever is already
  there: `--also-run`'s overlay must stay first), the sdist root after it (`tests.v1.core.utils`);
- `--noconftest`: vLLM's `tests/conftest.py` imports model runners, tblib and CUDA helpers that no
  allocator test needs; the one fixture our files need is in their own module;
- this module is loaded as a pytest plugin (`-p`) to prepare torchvision before collection
  (`impl.upstream_env.prepare`: the CUDA-built wheel beside a CPU torch);
- the tests that fail on the unmodified release are deselected: they are listed, by node id, in
  `upstream_tests/<sdist folder name>.txt`, and a file that cannot even be collected here by its
  path alone (ignored). Only tests that pass on the release count;
- SGLang's test kit (`sglang.test.test_utils`, imported by its unittest classes) imports its
  benchmark datasets, which import Hugging Face `datasets` at module level; no allocator test
  loads a dataset, so where `datasets` is not installed a stand-in that raises when used
  (`upstream_stand_ins/datasets.py`) goes last on the path;
- SGLang's tests pick their device with `sglang.srt.utils.get_device()`, which on a machine with no
  accelerator raises unless SGLang's CPU engine is on (`SGLANG_USE_CPU_ENGINE=1`, which imports
  `sgl_kernel`, not installed here); for a repository's tests (ROOT with a `test/` folder) the
  plugin makes it answer "cpu" there instead (`_cpu_when_no_accelerator`). The allocators and
  caches under test never call it: they take the device they are given.
`--record` runs the FILEs once on the release and merges what failed into that list per file:
the entries of the files it ran are replaced, every other file's are kept (one list serves the
files of several commands: recording one must not drop the others).
The exit status is pytest's. Nothing is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent / "upstream_tests"
STAND_INS = Path(__file__).parent / "upstream_stand_ins"
TEST_FOLDERS = ("tests", "test")  # an sdist's, a repository's
# Where the plugin side writes each test's outcome while `--record` runs (an environment
# variable: the plugin runs in pytest's process, the recorder in this one).
RECORD_TO = "KVFUZZ_UPSTREAM_RECORD_TO"
# Set by the runner for a repository's tests (SGLang's): the plugin lets get_device() answer "cpu".
CPU_DEVICE = "KVFUZZ_UPSTREAM_CPU_DEVICE"
# A list's line of per-file counts: "# file: PATH PASSED FAILING".
COUNT = "# file: "


# -- the plugin side: runs in pytest's process -----------------------------------------------
def pytest_configure(config) -> None:
    """Before collection imports an engine (importing torch and torchvision costs seconds:
    only where an engine is there to need them)."""
    import importlib.util

    from kvfuzz.impl.upstream_env import UPSTREAM_PACKAGES, prepare

    if any(importlib.util.find_spec(name) for name in UPSTREAM_PACKAGES):
        prepare()
    if os.environ.get(CPU_DEVICE) == "1" and importlib.util.find_spec("sglang"):
        _cpu_when_no_accelerator()


def _cpu_when_no_accelerator() -> None:
    """`sglang.srt.utils.get_device()` answering "cpu" where it would raise for want of an
    accelerator: what SGLang's CPU engine answers, without the CPU engine's kernels. Before
    collection, so the test modules' `from sglang.srt.utils import get_device` takes it."""
    import sglang.srt.utils as utils
    import sglang.srt.utils.common as common

    released = common.get_device

    def get_device(device_id=None):
        try:
            return released(device_id)
        except RuntimeError:  # "No accelerator (CUDA, XPU, ...) or platform plugin is available."
            return "cpu"

    utils.get_device = common.get_device = get_device


def pytest_runtest_logreport(report) -> None:
    """Recording: each phase's outcome by pytest's own node id (what `--deselect` takes; a junit
    report's class names lose the file of a test in a class)."""
    _write_outcome(report.outcome, report.when, report.nodeid)


def pytest_collectreport(report) -> None:
    """Recording: a file that cannot be collected here (an import error)."""
    if report.failed and "::" not in report.nodeid:
        _write_outcome("failed", "collect", report.nodeid)


def _write_outcome(outcome: str, when: str, nodeid: str) -> None:
    path = os.environ.get(RECORD_TO)
    if path:
        with open(path, "a") as out:
            out.write(f"{outcome} {when} {nodeid}\n")


# -- the list of tests failing on the release ------------------------------------------------
def failing_list(sdist: Path) -> Path:
    return HERE / f"{sdist.resolve().name}.txt"


def read_failing(sdist: Path) -> list[str]:
    """The list's entries: node ids, and paths of files that cannot be collected."""
    return read_list(failing_list(sdist))[0]


def read_list(path: Path) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """(entries, {file: (passed, failing)}) of a list; one written before per-file counts were
    kept has entries only."""
    if not path.exists():
        return [], {}
    entries, counts = [], {}
    for line in path.read_text().splitlines():
        if line.startswith(COUNT):
            file, passed, failing = line[len(COUNT):].split()
            counts[file] = (int(passed), int(failing))
        elif line.split("#")[0].strip():
            entries.append(line.split("#")[0].strip())
    return entries, counts


def file_of(entry: str) -> str:
    return os.path.normpath(entry.split("::")[0])


def covered(file: str, recorded: list[str]) -> bool:
    """Whether `file` is one of the recorded paths or inside a recorded folder."""
    return any(file == path or file.startswith(path + os.sep)
               for path in map(os.path.normpath, recorded))


def tally(lines: list[str]) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """What the plugin wrote, as (failing entries, {file: (passed, failing)}): a test fails if any
    phase of it failed and passes if its call passed and nothing failed (a skip is neither); a
    file that cannot be collected is one failing entry, its path."""
    failed, passed = set(), set()
    for line in lines:
        outcome, when, nodeid = line.split(" ", 2)
        if outcome == "failed":
            failed.add(nodeid)
        elif outcome == "passed" and when == "call":
            passed.add(nodeid)
    counts: dict[str, list[int]] = {}
    for nodeid in passed - failed:
        counts.setdefault(file_of(nodeid), [0, 0])[0] += 1
    for nodeid in failed:
        counts.setdefault(file_of(nodeid), [0, 0])[1] += 1
    return sorted(failed), {file: (p, f) for file, (p, f) in counts.items()}


def record(sdist: Path, files: list[str], extra: list[str]) -> int:
    """Runs the files on the release and merges the node ids that fail into the list: the
    entries and counts of the files run are replaced, every other file's kept."""
    import tempfile

    node = next((file for file in files if "::" in file), None)
    if node or not files:
        print(f"upstream_tests: --record takes test files or folders, not node ids "
              f"({node or 'none given'})", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        outcomes = Path(folder) / "outcomes"
        outcomes.touch()
        env = environment(sdist) | {RECORD_TO: str(outcomes)}
        subprocess.run(command_line(files, extra + ["-rfE", "--continue-on-collection-errors"],
                                    []), cwd=sdist, env=env)
        failing, counts = tally(outcomes.read_text().splitlines())
    old_entries, old_counts = read_list(failing_list(sdist))
    entries = sorted({e for e in old_entries if not covered(file_of(e), files)} | set(failing))
    counts |= {file: n for file, n in old_counts.items() if not covered(file, files)}
    HERE.mkdir(exist_ok=True)
    failing_list(sdist).write_text(
        f"# {sdist.resolve().name}: tests failing on the unmodified release here (CPU), "
        f"deselected (a path alone: a file that\n# cannot be collected, ignored); per file "
        f"recorded, tests passed and failing. `python -m kvfuzz.bench.upstream_tests\n"
        f"# SDIST FILE... --record` writes it, replacing the entries of the files it runs.\n"
        + "".join(f"{COUNT}{file} {p} {f}\n" for file, (p, f) in sorted(counts.items()))
        + "".join(f"{entry}\n" for entry in entries))
    passed = sum(p for file, (p, _) in counts.items() if covered(file, files))
    print(f"{passed} passed, {len(failing)} failing -> {failing_list(sdist)} (in all "
          f"{sum(p for p, _ in counts.values())} passing, {len(entries)} deselected, "
          f"{len(counts)} files)")
    return 0


# -- running ---------------------------------------------------------------------------------
def environment(root: Path | None = None) -> dict:
    """The tests' environment; `root` with a `test/` folder (a repository's, SGLang's) turns on
    the plugin's CPU answer of get_device()."""
    from kvfuzz.impl import upstream_cache

    env, folder = dict(os.environ), upstream_cache.folder()
    if not upstream_cache.fetched():
        sys.exit("upstream_tests: no released engines in kvfuzz's cache (run `kvfuzz upstream "
                 "fetch`)")
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    stand_ins = [] if _installed("datasets") else [str(STAND_INS)]
    env["PYTHONPATH"] = os.pathsep.join(parts + [str(folder), "."] + stand_ins)
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    if root is not None and (root / "test").is_dir():
        env[CPU_DEVICE] = "1"
    return env


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def command_line(files: list[str], extra: list[str], deselect: list[str]) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
               "-p", "kvfuzz.bench.upstream_tests", "-W", "ignore::DeprecationWarning"]
    for entry in deselect:  # a path alone: a file that cannot be collected here
        command += ["--deselect", entry] if "::" in entry else ["--ignore", entry]
    return command + extra + files


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    recording = "--record" in args
    args = [a for a in args if a != "--record"]
    if not args or not any(Path(args[0], folder).is_dir() for folder in TEST_FOLDERS):
        print("usage: python -m kvfuzz.bench.upstream_tests ROOT FILE... [--record] "
              "[pytest options]  (ROOT: an extracted sdist with a tests/ folder, or a "
              "repository's files with a test/ folder)", file=sys.stderr)
        return 2
    sdist = Path(args[0]).expanduser()
    # A test path is one the sdist holds (a node id by its file); every other word is pytest's,
    # in its order, so an option's value stays with it (`-k EXPR`, `-p no:NAME`).
    files = [a for a in args[1:] if not a.startswith("-") and (sdist / a.split("::")[0]).exists()]
    extra = [a for a in args[1:] if a not in files]
    if recording:
        return record(sdist, files, extra)
    command = command_line(files, extra, read_failing(sdist))
    return subprocess.run(command, cwd=sdist, env=environment(sdist)).returncode


if __name__ == "__main__":
    sys.exit(main())
