"""vLLM's CPU offloading manager as 0.29 and 0.30 shipped it, for real (slow): each release first
on the path of one process running `kvfuzz`'s commands (tests/radix/test_legacy_release.py's
`kvfuzz_commands`), as a user's `PYTHONPATH=<release> kvfuzz ...` has it, judged
by its release's contract (oracle/offload/contract.py, read from its classes). Finding R's saved
trace (`corpus/history/vllm-0.29.0/`: ARC refuses a store while T1 holds an evictable chunk)
diverges on 0.29 and replays clean on 0.30; finding S's (`corpus/history/vllm-0.30.0/`: a stored
key offered again under the store threshold evicted by that offer) diverges on 0.30 and replays
clean on the released 0.33 (it was fixed in 0.31: docs/release-history.md); 0.30's classes (no
request hooks, the threshold counted per offer) and 0.29's (counted per key) agree on seeded
traces. Two releases only: a vLLM release is some 400 MB to fetch and 800 MB installed, where an
SGLang one is 7 and 180, and CI fetches what these tests name. 0.28's per-lookup counting is
checked against fakes in test_legacy_contract.py. Each release is installed as `kvfuzz history`
installs it (a no-op where it is there already); without the release in the cache nor a
registry, the test skips and says so."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.history import releases
from kvfuzz.fuzz.history.releases import Release
from tests.conftest import CORPUS
from tests.helpers import kvfuzz_here, needs_engine
from tests.radix.test_legacy_release import kvfuzz_commands

pytestmark = needs_engine("vllm")  # slow, and the lock's packages the release imports

R = CORPUS / "history" / "vllm-0.29.0" / "offload-daf52043def4e46f.json"
S = CORPUS / "history" / "vllm-0.30.0" / "offload-5449299b12c04f83.json"


def folder_of(version: str):
    try:
        return releases.install(Release("vllm", version))
    except releases.ReleaseError as error:  # no registry here: said, not failed
        pytest.skip(f"cannot install vllm {version}: {error}")


def test_0_29_diverges_on_finding_r_and_agrees_on_seeded_traces(tmp_path):
    # One process for the release's commands (its vLLM imported once).
    r_old, seeded = kvfuzz_commands(folder_of("0.29.0"),
                                    ("replay", R, "--impl", "vllm.offload.arc"),
                                    SEEDED + ("--corpus", tmp_path))
    assert r_old.returncode == 1, r_old.stdout[-2000:] + r_old.stderr[-2000:]
    assert "prepare_store: expected ([(1004, 0)], [(1003, 0)]), actual None" in \
        r_old.stdout + r_old.stderr
    assert_agrees(seeded)


def test_0_30_replays_r_clean_diverges_on_finding_s_and_agrees_on_seeded_traces(tmp_path):
    r_fixed, s_old, seeded = kvfuzz_commands(
        folder_of("0.30.0"), ("replay", R, "--impl", "vllm.offload.arc"),
        ("replay", S, "--impl", "vllm.offload.lru"), SEEDED + ("--corpus", tmp_path))
    assert r_fixed.returncode == 0, r_fixed.stdout[-2000:] + r_fixed.stderr[-2000:]
    assert s_old.returncode == 1, s_old.stdout[-2000:] + s_old.stderr[-2000:]
    assert "prepare_store evicted (1001, 0) while it was offered in this call" in \
        s_old.stdout + s_old.stderr
    assert_agrees(seeded)


def test_finding_s_replays_clean_on_the_release():
    fixed = kvfuzz_here("replay", S, "--impl", "vllm.offload.lru")  # 0.33 as locked; 0.31 fixed it
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


# 0.30's classes have no request hooks and count the threshold per offer, 0.29's per key.
SEEDED = ("diff", "offload", "--impl", "vllm.offload.lru", "--cases", "4")


def assert_agrees(done) -> None:
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "ran to the last op: 4/4" in text and "not supported" not in text
