"""`UnifiedRadixCache` of SGLang 0.5.17 for real (slow): the release with the pluggable tree core
(`tree_core`, `create_tree_core`, a registry of the Python core alone) but the scheduler calls of
its day, first on the path of one process running `kvfuzz` for every command
(`tests.radix.test_legacy_release.kvfuzz_commands`, once a run for every file's commands on it:
tests/radix/release_batch.py), installed as that module installs it. Its
full-attention and SWA entries agree on seeded traces that reach chunk checkpoints and finishes.
Before the reads this tests each crashed or diverged on every trace: the lock's receipt read off
the request's own fields (`'Request' object has no attribute 'swa_uuid_for_lock'` at a
checkpoint, `swa_prefix_lock_released` at a finish: impl/radix/legacy.py:request_lock_fields),
the window its checkpoint does not free (`swa cursor ... expected 1`: NO_CHECKPOINT_WINDOW_FREE),
and the path reads its Python core lacks (`match_full_device_prefix`: node_tree.CoreNodeReads,
branch donorold). The Rust entry is one line there (impl/unified/backend.py:rust_core_absent).
Seeded cases 4 and 5 of the full-attention entry stop on finding D (the paged
allocator's Triton kernel, docs/release-history.md), so the first four are run."""

from __future__ import annotations

import re

from tests.helpers import needs_engine
from tests.radix import release_batch

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports


# (declared at import, run once a run with every other file's commands on 0.5.17:
# tests/radix/release_batch.py)
COMMANDS = release_batch.on("0.5.17", *(
    ("diff", "unified", "--impl", entry, "--cases", str(cases), "--timeout", "200", "--corpus",
     release_batch.OWN_CORPUS)
    for entry, cases in (("sglang.unified.python", 4), ("sglang.unified.swa.python", 3))), (
    "diff", "unified", "--impl", "sglang.unified.rust", "--cases", "1"))


def test_0_5_17s_full_and_swa_entries_agree_on_its_python_core(tmp_path_factory):
    full, swa, rust = COMMANDS.results(tmp_path_factory)
    # a registry of the Python core alone: the Rust entry is one line, not a crash per trace
    assert rust.returncode == 2, rust.stdout[-2000:] + rust.stderr[-2000:]
    assert ("not supported: sglang 0.5.17: UnifiedRadixCache: its tree core registry has no "
            "'rust' backend (registered: python") in rust.stderr
    for done, entry, cases in ((full, "sglang.unified.python", 4),
                               (swa, "sglang.unified.swa.python", 3)):
        text = done.stdout + done.stderr
        assert done.returncode == 0, text[-3000:]
        assert re.search(rf"^  {re.escape(entry)}\s+{cases}\s+{cases}\s+0\s+(no|0)\b", text,
                         re.M), text[-3000:]
        assert "finish cached" in text and "checkpoint" in text
        assert "tree core: python on" in text
