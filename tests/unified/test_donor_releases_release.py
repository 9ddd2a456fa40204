"""The unified Mamba entries on the unified memory pool (`sglang.unified.mamba.donor.*`) and the
Mamba entry beside them on earlier SGLang releases for real (slow), each release first on the
path of the process running `kvfuzz` (one a run for every file's commands on it:
tests/radix/release_batch.py), installed as tests/radix/test_legacy_release.py installs
it (skipped, and said, only where it cannot be). Before these reads (`impl/unified/mamba.py`,
`node_tree.walkable`, `fuzz/unified/target.py`) each cell crashed in the constructor:
0.5.11-0.5.14 `ModuleNotFoundError: ... unified_memory_pool`, 0.5.15-0.5.21
`init_unified_mamba_pools() got an unexpected keyword argument 'enable_mamba_extra_buffer_lazy'`,
0.5.16's Mamba entry `... has no attribute 'get_global_server_args'`, 0.5.17-0.5.19's
`'UnifiedTreeCore' object has no attribute 'match_full_device_prefix'`, 0.5.17's
`... no attribute '_tree_core_backend'`; 0.5.17's donor entry then diverged on seeded case 1
("Full is the donor": the release has no Full donor, judged under its own contract now)."""

from __future__ import annotations

import re

from tests.conftest import CORPUS
from tests.helpers import needs_engine
from tests.radix import release_batch
from tests.radix.release_batch import OWN_CORPUS

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports

DONOR = "sglang.unified.mamba.donor.python"
V = CORPUS / "history" / "sglang-0.5.16" / "unified-84e51c74206b5da8.json"


def _agreed(done, entry: str, cases: int) -> None:
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert re.search(rf"^  {re.escape(entry)}\s+{cases}\s+{cases}\s+0\s+(no|0)\b", text,
                     re.M), text[-3000:]
    assert "not supported" not in text


# (every command here declared at import, run once a run per release with every other file's
# commands on it: tests/radix/release_batch.py)
DONOR_0_5_14 = release_batch.on("0.5.14", ("diff", "unified", "--impl", DONOR, "--cases", "1"))


def test_before_0_5_15_a_donor_entry_is_one_line(tmp_path_factory):
    done, = DONOR_0_5_14.results(tmp_path_factory)
    line = done.stdout + done.stderr
    assert done.returncode == 2, line[-2000:]
    assert "not supported: sglang 0.5.14 has no module sglang.srt.mem_cache." \
           "unified_memory_pool" in line
    assert "Traceback" not in line


V_0_5_16 = release_batch.on("0.5.16", ("replay", V, "--impl", DONOR), (
    "diff", "unified", "--impl", "sglang.unified.mamba.python", "--cases", "2",
    "--timeout", "200", "--corpus", OWN_CORPUS))


def test_finding_v_diverges_on_0_5_16_and_its_mamba_entry_agrees(tmp_path_factory):
    """0.5.16's own `UnifiedHybridReqToTokenPool._init_mamba_pool` takes no
    `enable_gdn_replayssm_spec`, which its parent passes (finding V): the crash is the
    release's, in its frame, no longer kvfuzz's keyword. Its Mamba entry agrees, the grid read
    through `get_server_args` and each insert's node named by the walk."""
    donor, mamba = V_0_5_16.results(tmp_path_factory)
    text = donor.stdout + donor.stderr
    assert donor.returncode == 1, text[-3000:]
    assert "unexpected keyword argument 'enable_gdn_replayssm_spec'" in text, text[-3000:]
    assert "enable_mamba_extra_buffer_lazy" not in text
    _agreed(mamba, "sglang.unified.mamba.python", 2)


AGREE_0_5_17 = release_batch.on("0.5.17", (
    "diff", "unified", "--impl", DONOR, "--cases", "2", "--timeout", "200",
    "--corpus", OWN_CORPUS), (
    "diff", "unified", "--impl", "sglang.unified.mamba.python", "--cases", "2",
    "--timeout", "200", "--corpus", OWN_CORPUS), (
    "replay", V, "--impl", DONOR))


def test_0_5_17s_donor_and_mamba_entries_agree_on_its_python_core(tmp_path_factory):
    """0.5.17's Python core has no read-only path read (read from its nodes) and its pool no
    Full donor (`NO_FULL_DONOR`): seeded case 1 diverged on "Full is the donor" before. V's
    file replays clean there (0.5.17's `_init_mamba_pool` takes the parent's switch)."""
    donor, mamba, fixed = AGREE_0_5_17.results(tmp_path_factory)
    _agreed(donor, DONOR, 2)
    assert fixed.returncode == 0, (fixed.stdout + fixed.stderr)[-2000:]  # V: fixed in 0.5.17
    _agreed(mamba, "sglang.unified.mamba.python", 2)


RUST_0_5_19 = release_batch.on("0.5.19", (
    "diff", "unified", "--impl", "sglang.unified.mamba.donor.rust", "--cases", "1"))


def test_0_5_19s_rust_entries_are_one_line(tmp_path_factory):
    """0.5.19's Rust core has no read-only path read (`node_by_id` raises there)."""
    rust, = RUST_0_5_19.results(tmp_path_factory)
    line = rust.stdout + rust.stderr
    assert rust.returncode == 2, line[-2000:]
    assert "its Rust tree core has no read-only path read" in line, line[-2000:]


DONORS_0_5_21 = release_batch.on("0.5.21", *(
    ("diff", "unified", "--impl", entry, "--cases", "2", "--timeout", "200",
     "--corpus", OWN_CORPUS)
    for entry in (DONOR, "sglang.unified.mamba.donor.rust")))


def test_0_5_21s_donor_entries_agree(tmp_path_factory):
    """0.5.21's `init_unified_mamba_pools` has no `enable_mamba_extra_buffer_lazy` (0.5.22's)."""
    python, rust = DONORS_0_5_21.results(tmp_path_factory)
    _agreed(python, DONOR, 2)
    _agreed(rust, "sglang.unified.mamba.donor.rust", 2)
