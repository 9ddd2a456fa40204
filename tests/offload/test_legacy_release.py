"""vLLM's CPU offloading manager as 0.29 and 0.30 shipped it, for real (slow): each release first
on the path of a `kvfuzz` process, as a user's `PYTHONPATH=<release> kvfuzz ...` has it, judged
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
from tests.radix.test_legacy_release import kvfuzz_with

pytestmark = needs_engine("vllm")  # slow, and the lock's packages the release imports

R = CORPUS / "history" / "vllm-0.29.0" / "offload-daf52043def4e46f.json"
S = CORPUS / "history" / "vllm-0.30.0" / "offload-5449299b12c04f83.json"


def folder_of(version: str):
    try:
        return releases.install(Release("vllm", version))
    except releases.ReleaseError as error:  # no registry here: said, not failed
        pytest.skip(f"cannot install vllm {version}: {error}")


def test_finding_r_diverges_on_0_29_and_replays_clean_on_0_30():
    old = kvfuzz_with(folder_of("0.29.0"), "replay", R, "--impl", "vllm.offload.arc")
    assert old.returncode == 1, old.stdout[-2000:] + old.stderr[-2000:]
    assert "prepare_store: expected ([(1004, 0)], [(1003, 0)]), actual None" in \
        old.stdout + old.stderr
    fixed = kvfuzz_with(folder_of("0.30.0"), "replay", R, "--impl", "vllm.offload.arc")
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


def test_finding_s_diverges_on_0_30_and_replays_clean_on_the_release():
    old = kvfuzz_with(folder_of("0.30.0"), "replay", S, "--impl", "vllm.offload.lru")
    assert old.returncode == 1, old.stdout[-2000:] + old.stderr[-2000:]
    assert "prepare_store evicted (1001, 0) while it was offered in this call" in \
        old.stdout + old.stderr
    fixed = kvfuzz_here("replay", S, "--impl", "vllm.offload.lru")  # 0.33, as locked
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]


@pytest.mark.parametrize("version", ["0.30.0", "0.29.0"])
def test_a_release_without_request_hooks_agrees_on_seeded_traces(version, tmp_path):
    done = kvfuzz_with(folder_of(version), "diff", "offload", "--impl", "vllm.offload.lru",
                       "--cases", "4", "--corpus", tmp_path)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "ran to the last op: 4/4" in text and "not supported" not in text
