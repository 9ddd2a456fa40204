"""Upstream's own tests, run on CPU against the released engine in kvfuzz's upstream cache: the
test command `kvfuzz mutate --also-run` is given (docs/mutate.md, "Upstream's own tests").

    python -m kvfuzz.bench.upstream_tests ROOT FILE... [--record] [pytest options]

ROOT is the release's extracted sdist (its `tests/` folder holds FILE, e.g.
`tests/v1/core/test_prefix_caching.py`), or a repository's files with a `test/` folder (SGLang's
tests are in its repository only: `bench/upstream_sources.py` puts the ones kvfuzz uses in
`~/.cache/kvfuzz/sdist/sglang-0.5.23-tests`). What it takes to run them here:
- the released package comes from `kvfuzz upstream where` (PYTHONPATH, after whatever is already
  there: `--also-run`'s overlay must stay first), the sdist root after it (`tests.v1.core.utils`);
- `--noconftest`: vLLM's `tests/conftest.py` imports model runners, tblib and CUDA helpers that no
  allocator test needs; the one fixture our files need is in their own module;
- this module is loaded as a pytest plugin (`-p`) to prepare torchvision before collection
  (`impl.upstream_env.prepare`: the CUDA-built wheel beside a CPU torch);
- the tests that fail on the unmodified release are deselected: they are listed, by node id, in
  `upstream_tests/<sdist folder name>.txt` (`--record` writes that list by running the files
  once). Only tests that pass on the release count;
- SGLang's test kit (`sglang.test.test_utils`, imported by its unittest classes) imports its
  benchmark datasets, which import Hugging Face `datasets` at module level; no allocator test
  loads a dataset, so where `datasets` is not installed a stand-in that raises when used
  (`upstream_stand_ins/datasets.py`) goes last on the path.
The exit status is pytest's. Nothing is installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent / "upstream_tests"
STAND_INS = Path(__file__).parent / "upstream_stand_ins"
TEST_FOLDERS = ("tests", "test")  # an sdist's, a repository's


def pytest_configure(config) -> None:  # the plugin side: runs in pytest's process
    """Before collection imports an engine (importing torch and torchvision costs seconds:
    only where an engine is there to need them)."""
    import importlib.util

    from kvfuzz.impl.upstream_env import UPSTREAM_PACKAGES, prepare

    if any(importlib.util.find_spec(name) for name in UPSTREAM_PACKAGES):
        prepare()


def failing_list(sdist: Path) -> Path:
    return HERE / f"{sdist.resolve().name}.txt"


def read_failing(sdist: Path) -> list[str]:
    path = failing_list(sdist)
    if not path.exists():
        return []
    return [line.split("#")[0].strip() for line in path.read_text().splitlines()
            if line.split("#")[0].strip()]


def environment() -> dict:
    from kvfuzz.impl import upstream_cache

    env, folder = dict(os.environ), upstream_cache.folder()
    if not upstream_cache.fetched():
        sys.exit("upstream_tests: no released engines in kvfuzz's cache (run `kvfuzz upstream "
                 "fetch`)")
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    stand_ins = [] if _installed("datasets") else [str(STAND_INS)]
    env["PYTHONPATH"] = os.pathsep.join(parts + [str(folder), "."] + stand_ins)
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    return env


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def node_id(root: Path, classname: str, name: str) -> str:
    """A pytest node id from a junit test case: its `classname` is the dotted module path, then
    the class for a test in a class (`test.unit.test_pool.TestPool`). The module is the longest
    dotted prefix that is a file under `root`; what follows it are classes."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = "/".join(parts[:cut]) + ".py"
        if (root / module).is_file():
            return "::".join([module, *parts[cut:], name])
    return f"{'/'.join(parts)}.py::{name}"  # no such file: as pytest's plain test functions


def command_line(files: list[str], extra: list[str], deselect: list[str]) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
               "-p", "kvfuzz.bench.upstream_tests", "-W", "ignore::DeprecationWarning"]
    for node in deselect:
        command += ["--deselect", node]
    return command + extra + files


def record(sdist: Path, files: list[str], extra: list[str]) -> int:
    """Runs the files on the release and writes the node ids that fail to the list."""
    import tempfile
    import xml.etree.ElementTree as ElementTree

    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "junit.xml"
        command = command_line(files, extra + ["-rfE", f"--junitxml={report}"], [])
        subprocess.run(command, cwd=sdist, env=environment())
        cases = list(ElementTree.parse(report).iter("testcase"))
    failing, passed = [], 0
    for case in cases:
        if case.find("skipped") is not None:
            continue
        if case.find("failure") is None and case.find("error") is None:
            passed += 1
            continue
        failing.append(node_id(sdist, case.get("classname", ""), case.get("name")))
    HERE.mkdir(exist_ok=True)
    failing_list(sdist).write_text(
        f"# tests of {' '.join(files)} failing on the unmodified release here (CPU): deselected\n"
        f"# {passed} passed; written by `python -m kvfuzz.bench.upstream_tests --record`\n"
        + "".join(f"{node}\n" for node in sorted(failing)))
    print(f"{passed} passed, {len(failing)} failing -> {failing_list(sdist)}")
    return 0


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
    files = [a for a in args[1:] if not a.startswith("-")]
    extra = [a for a in args[1:] if a.startswith("-")]
    if recording:
        return record(sdist, files, extra)
    command = command_line(files, extra, read_failing(sdist))
    return subprocess.run(command, cwd=sdist, env=environment()).returncode


if __name__ == "__main__":
    sys.exit(main())
