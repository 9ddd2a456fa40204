"""`kvfuzz.guard` and `kvfuzz.record` of a live Mamba slot allocator (fuzz/mamba/guard.py): the
allocator's calls (allocations, frees by slot, alloc groups) made by kvfuzz's own batch
scheduler on kvfuzz's class, on SGLang's released `MambaSlotAllocator` and on every mutant.
The guard's verdict on a trace is the batch judge's; its file replays; what the trace cannot
model is refused before the call is made. SGLang's class's tests skip without SGLang."""

import pytest

import kvfuzz
from kvfuzz.fuzz.mamba.target import MAMBA
from kvfuzz.strategies.mamba.trace import FreeSlots
from tests import guarding

FAMILIES = {"mamba.torch": "mutant.mamba.", "sglang.mamba": "mutant.sglang.mamba."}


@pytest.mark.parametrize("released", guarding.families(FAMILIES, "mamba.torch"))
def test_the_guards_verdict_is_the_batch_judges_on_every_mutant(released, tmp_path):
    guarding.assert_every_mutant_of_the_family_caught(MAMBA, released, FAMILIES[released],
                                                      tmp_path)


@pytest.mark.parametrize("released", guarding.families(FAMILIES, "mamba.torch"))
def test_the_released_class_runs_guarded_and_its_record_replays(released, tmp_path):
    guarding.assert_released_runs_guarded_and_its_record_replays(
        MAMBA, MAMBA.catalogue.resolve(released), tmp_path, 30)


def ours(size: int = 8):
    return MAMBA.catalogue.resolve("mamba.torch").load()(size, "cpu")


def test_frees_by_slot_and_refusals(tmp_path):
    allocator = ours()
    guarded = kvfuzz.guard(allocator, "mamba", corpus=tmp_path)
    slots = guarded.alloc(3)
    guarded.free(slots[1:])
    assert guarded.kvfuzz_session.ops[-1] == FreeSlots(tuple(slots[1:].tolist()))
    assert guarded.available_size() == 7  # a read, through
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"_take\(\) is not modelled"):
        guarded._take(1)
    with pytest.raises(kvfuzz.Mismatch, match="twice"):
        guarded.free(slots[1:])  # freed again: the free list holds them twice
    used = ours()
    used.alloc(1)
    with pytest.raises(kvfuzz.GuardUnsupported, match="guard it before its first call"):
        kvfuzz.guard(used, "mamba")
    assert kvfuzz.replay(guarded.kvfuzz_session.divergence.saved_path, "mamba.torch").divergences
