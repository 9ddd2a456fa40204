"""RadixCache and PureSWARadixCache of SGLang 0.5.20 and 0.5.21 for real (slow), driven through
their own scheduler calls (impl/radix/legacy.py), each release first on the path of a process
running `kvfuzz`'s commands as a user's `PYTHONPATH=<release> kvfuzz ...` does
(`kvfuzz_commands`: the release imported once, each test's commands forked from it): finding
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


def kvfuzz_commands(folder, *commands, timeout: int = 580) -> list[subprocess.CompletedProcess]:
    """Each of `commands` (argv lists) run by `kvfuzz` with the release at `folder` first on its
    path, as a user's `PYTHONPATH=... kvfuzz` has it, the release imported once for all of them
    (`tests.release_session`: a batch forked from the release's server): its exit status and
    output, as `kvfuzz_with` gives them."""
    from tests.release_session import run_commands

    argvs = [[str(arg) for arg in argv] for argv in commands]
    return [subprocess.CompletedProcess(argv, status, out, err)
            for argv, (status, out, err) in zip(argvs, run_commands(folder, argvs, timeout))]


def test_finding_q_diverges_on_0_5_20_and_replays_clean_on_0_5_21():
    old, = kvfuzz_commands(folder_of("0.5.20"),
                           ("replay", Q, "--impl", "sglang.radix.pure_swa"))
    assert old.returncode == 1, old.stderr[-2000:]
    assert "node [4]: priority expected 2, actual 0" in old.stdout + old.stderr
    fixed, = kvfuzz_commands(folder_of("0.5.21"), ("replay", Q, "--impl", "sglang.radix.pure_swa",
                                                   "--impl", "sglang.radix"))
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


def test_0_5_21s_prefix_caches_agree_on_seeded_traces(tmp_path):
    # traces 0 and 1 of seed 0: chunk checkpoints, finishes with and without caching, probes,
    # inserts, evictions and a flush, through the old calls; trace 2 reaches finding D (the
    # paged allocator's kernel), not this adapter, and is left to docs/release-history.md
    done, = kvfuzz_commands(folder_of("0.5.21"), ("diff", "radix", "--impl", "sglang.radix",
                                                  "--impl", "sglang.radix.pure_swa", "--cases",
                                                  "2", "--corpus", tmp_path))
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert text.count("ran to the last op: 2/2") == 2 and "finish cached" in text
