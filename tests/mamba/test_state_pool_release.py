"""SGLang 0.5.12's Mamba slots for real (slow): the free list inside `memory_pool.MambaPool` (no
`allocator.mamba` module before 0.5.13), built as a state pool and driven without alloc groups
(impl/mamba/state_pool.py), with the release first on the path of one process running kvfuzz's
commands as a user's `PYTHONPATH=<release> kvfuzz ...` does
(tests/radix/test_legacy_release.py's `kvfuzz_commands`, once a run for every file's commands on
the release: tests/radix/release_batch.py). Its seeded traces agree, and
0.5.12's own class with one edit (freed slots to the head of the free list) is caught. Without
the adapter the entry is one "not supported" line (exit status 2) and both fail. The release is
installed from kvfuzz's wheel cache or the registry; only without either does the test skip."""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation, mutant_classes
from tests.helpers import needs_engine
from tests.radix import release_batch

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports

# Built from the installed release's source on first use (in the command's process).
__getattr__ = mutant_classes("sglang.srt.mem_cache.memory_pool", "MambaPool", {
    "FreePrepends": Mutation("MambaPool.free", "torch.cat((self.free_slots, free_index))",
                             "torch.cat((free_index, self.free_slots))",
                             "freed slots go to the head of the free list, not the tail")},
    "sglang_mamba_pool")


# (declared at import, run once a run with every other file's commands on 0.5.12:
# tests/radix/release_batch.py)
COMMANDS = release_batch.on(
    "0.5.12",
    ("diff", "mamba", "--impl", "sglang.mamba", "--cases", "30",
     "--corpus", release_batch.OWN_CORPUS),
    ("diff", "mamba", "--impl", f"{__name__}:FreePrepends", "--cases", "30",
     "--corpus", release_batch.OWN_CORPUS))


def test_0_5_12s_mamba_pool_agrees_and_a_mutant_of_it_is_caught(tmp_path_factory):
    released, mutant = COMMANDS.results(tmp_path_factory)
    text = released.stdout + released.stderr
    assert released.returncode == 0, text[-3000:]
    assert "ran to the last op: 30/30" in text and "group begin" not in text, text[-3000:]
    text = mutant.stdout + mutant.stderr
    assert mutant.returncode == 1 and "free list" in text, text[-3000:]
