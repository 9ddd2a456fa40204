"""RadixCache and PureSWARadixCache of SGLang 0.5.20 and 0.5.21 for real (slow), driven through
their own scheduler calls (impl/radix/legacy.py), each release first on the path of a process
running `kvfuzz`'s commands as a user's `PYTHONPATH=<release> kvfuzz ...` does
(`kvfuzz_commands`: one process a release for every test file's commands on it, the release
imported once: tests/radix/release_batch.py): finding
Q's saved trace (`corpus/history/sglang-0.5.20/`: the finish of PureSWARadixCache drops the
request's priority) diverges on 0.5.20 and replays clean on 0.5.21, and 0.5.21's classes agree
on seeded traces. Each release is installed from kvfuzz's wheel cache
(`~/.cache/kvfuzz/history/wheels`, as `kvfuzz history` fills it) or, on a fresh machine, from the
registry; only without either does the test skip, and say so."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvfuzz.fuzz.history import releases
from kvfuzz.fuzz.history.releases import Release
from kvfuzz.impl import upstream_cache
from tests.conftest import CORPUS
from tests.helpers import needs_engine
from tests.radix import release_batch

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports

Q = CORPUS / "history" / "sglang-0.5.20" / "radix-aaf4adcca95db5bd.json"


def folder_of(version: str):
    """The release installed as `kvfuzz history` installs it: from its wheel cache where the
    wheel is there, else from the registry (CI's fresh machine); skipped, and said, only where
    neither can give it."""
    release = Release("sglang", version)
    wheels = upstream_cache.cache_root() / "history" / "wheels"
    cached = list(wheels.glob(f"sglang-{version}-*.whl"))
    try:
        return releases.install(release, find_links=str(wheels) if cached else None)
    except releases.ReleaseError as error:  # no registry here: said, not failed
        pytest.skip(f"cannot install sglang {version}: {error}")


def kvfuzz_with(folder, *argv, timeout: int = 400) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=timeout)


# One process per release for a test's commands: kvfuzz's `main` (what `python -m kvfuzz.fuzz.cli`
# runs, a subreaper as that program is) once per command, the release first on the path as a
# user's `PYTHONPATH=... kvfuzz` has it. The release's SGLang is imported once, before the
# commands, so every command's workers and fork servers are forked with it: in a process per
# command each of them imported it again (some 8 to 10 s of CPU each, most of these tests' time).
SESSION = """
import contextlib, importlib, importlib.util, io, json, sys
from kvfuzz.fuzz.cli.main import main
from kvfuzz.fuzz.engine import catalogue
from kvfuzz.fuzz.engine.containment import become_subreaper, sweep
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.upstream_env import prepare_import
become_subreaper()
commands, out_file = json.loads(sys.argv[1]), sys.argv[2]
# The release's memory pools (the bulk of any of its allocators' imports) and the modules the
# commands' implementations name (their classes', what kvfuzz's adapters wrap), where the
# release has them: what each command's workers would import again otherwise.
names = {argv[i + 1] for argv in commands for i, word in enumerate(argv[:-1]) if word == "--impl"}
chosen = [i for t in TARGETS.values() for i in t.catalogue.implementations if i.name in names]
modules = {"sglang.srt.mem_cache.memory_pool"} if any(i.requires == "sglang" for i in chosen) \
    else set()
for impl in chosen:
    modules |= {path.split(":")[0] for path in (*impl.paths, *impl.mutates)
                if path.startswith(f"{impl.requires}.")}
for module in sorted(modules):
    with prepare_import(module):  # (finding it imports its packages)
        try:  # (find_spec raises where a parent is a module, as allocator.py before 0.5.13)
            if importlib.util.find_spec(module):
                importlib.import_module(module)
        except ImportError:  # the command's own import says why (or, for want of
            pass             # sgl_kernel, retries with kvfuzz's stand-in)
results = []
for argv in commands:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as stop:
            status = stop.code
    sweep()
    # A refusal is remembered once a process (catalogue._INSTALLED) and said again by every
    # later diff of its target; a user's next `kvfuzz` starts without it: so does the next command.
    for impl, found in list(catalogue._INSTALLED.items()):
        if isinstance(found, Exception):
            del catalogue._INSTALLED[impl]
    results.append([status, out.getvalue(), err.getvalue()])
with open(out_file, "w") as handle:
    json.dump(results, handle)
"""


def kvfuzz_commands(folder, *commands, timeout: int = 580,
                    env: dict[str, str] | None = None) -> list[subprocess.CompletedProcess]:
    """Each of `commands` (argv lists) run by `kvfuzz` with the release at `folder` on its path,
    in one process (`SESSION`): its exit status and output, as `kvfuzz_with` gives them. `env`:
    variables set for that process (over this one's)."""
    import json
    import tempfile

    env = dict(os.environ, **(env or {}),
               PYTHONPATH=f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    argvs = [[str(arg) for arg in argv] for argv in commands]
    with tempfile.TemporaryDirectory() as scratch:
        out_file = os.path.join(scratch, "results.json")
        done = subprocess.run([sys.executable, "-c", SESSION, json.dumps(argvs), out_file],
                              env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stderr[-3000:]
        with open(out_file) as handle:
            results = json.load(handle)
    return [subprocess.CompletedProcess(argv, status, out, err)
            for argv, (status, out, err) in zip(argvs, results)]


# (declared at import, run once a run per release with every other file's commands on it:
# tests/radix/release_batch.py)
Q_OLD = release_batch.on("0.5.20", ("replay", Q, "--impl", "sglang.radix.pure_swa"))
Q_FIXED = release_batch.on("0.5.21", ("replay", Q, "--impl", "sglang.radix.pure_swa",
                                      "--impl", "sglang.radix"))
# traces 0 and 1 of seed 0: chunk checkpoints, finishes with and without caching, probes,
# inserts, evictions and a flush, through the old calls; trace 2 reaches finding D (the
# paged allocator's kernel), not this adapter, and is left to docs/release-history.md
SEEDED = release_batch.on("0.5.21", ("diff", "radix", "--impl", "sglang.radix", "--impl",
                                     "sglang.radix.pure_swa", "--cases", "2",
                                     "--corpus", release_batch.OWN_CORPUS))


def test_finding_q_diverges_on_0_5_20_and_replays_clean_on_0_5_21(tmp_path_factory):
    old, = Q_OLD.results(tmp_path_factory)
    assert old.returncode == 1, old.stderr[-2000:]
    assert "node [4]: priority expected 2, actual 0" in old.stdout + old.stderr
    fixed, = Q_FIXED.results(tmp_path_factory)
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


def test_0_5_21s_prefix_caches_agree_on_seeded_traces(tmp_path_factory):
    done, = SEEDED.results(tmp_path_factory)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert text.count("ran to the last op: 2/2") == 2 and "finish cached" in text
