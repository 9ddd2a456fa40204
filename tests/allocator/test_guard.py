"""`kvfuzz.guard` and `kvfuzz.record` of a live SGLang-style allocator (fuzz/allocator/guard.py):
the allocator's calls by slot, made by kvfuzz's own batch scheduler on kvfuzz's class, on the
released SGLang classes and on every mutant. The guard's verdict on a trace is the batch
judge's; its file (the calls up to the bad one) replays; what the trace cannot model is
refused before the call is made. The released classes' tests skip without SGLang."""

import pytest
import torch

import kvfuzz
from kvfuzz.fuzz.allocator.target import ALLOCATOR
from kvfuzz.strategies.allocator.trace import ExtendSlots, FreeSegments, Misuse
from tests import guarding

# Each released class and its mutants (kvfuzz's own class: mutants of it; SGLang's: of its source).
FAMILIES = {"allocator.torch": "mutant.allocator.", "sglang.paged": "mutant.sglang.paged.",
            "sglang.token": "mutant.sglang.token."}
# Mutants the batch judge catches (tests/allocator/test_mutants.py) and a guard cannot, and why.
UNGUARDED = {
    "mutant.sglang.token.offload_never_loads":
        "its fault is a call the allocator fails to pass on to the engine's KV cache; a guard "
        "wraps the allocator, not the cache, and must not move a live engine's KV to host "
        "memory and back to find out (the batch judge does, on a recording cache)",
}


@pytest.mark.parametrize("released", guarding.families(FAMILIES, "allocator.torch"))
def test_the_guards_verdict_is_the_batch_judges_on_every_mutant(released, tmp_path):
    guarding.assert_every_mutant_of_the_family_caught(ALLOCATOR, released, FAMILIES[released],
                                                      tmp_path, UNGUARDED)


@pytest.mark.parametrize("released", guarding.families(FAMILIES, "allocator.torch"))
def test_the_released_class_runs_guarded_and_its_record_replays(released, tmp_path):
    guarding.assert_released_runs_guarded_and_its_record_replays(
        ALLOCATOR, ALLOCATOR.catalogue.resolve(released), tmp_path, 30)


def ours(page_size: int = 4, size: int = 64, need_sort: bool = False):
    cls = ALLOCATOR.catalogue.resolve("allocator.torch").load()
    return cls(size, page_size, torch.float16, "cpu", None, need_sort)


def lengths(*values):
    return torch.tensor(values, dtype=torch.int64)


def test_the_engines_batch_calls_become_by_slot_ops(tmp_path):
    guarded = kvfuzz.guard(ours(), "allocator", corpus=tmp_path)
    out = guarded.alloc_extend(lengths(0, 0), lengths(0, 0), lengths(5, 3), lengths(5, 3),
                               lengths(-1, -1), 8)
    assert out.tolist() == [4, 5, 6, 7, 8, 12, 13, 14]  # the oracle's slots, compared
    guarded.free_segments([(out[4:5], 4), (torch.tensor([], dtype=torch.int64), 8)])
    guarded.free_group_end()  # no group open: the trace's misuse op of that name
    ops = guarded.kvfuzz_session.ops
    assert ops[0] == ExtendSlots((0, 0), (5, 3), (-1, -1))
    assert ops[1] == FreeSegments((8,), (4, 8), (1, 0))
    assert ops[2] == Misuse("group_end_unopened")
    assert kvfuzz.replay(guarded.kvfuzz_session.save(tmp_path / "s"), "allocator.torch").ok


def test_what_the_trace_cannot_model_is_refused_before_the_call(tmp_path):
    allocator = ours()
    guarded = kvfuzz.guard(allocator, "allocator", corpus=tmp_path)
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"merge_and_sort_free\(\) is not "
                                                      r"modelled by the allocator trace"):
        guarded.merge_and_sort_free()
    with pytest.raises(kvfuzz.GuardUnsupported, match="extend_num_tokens 9, its lengths sum "
                                                      "to 5"):
        guarded.alloc_extend(lengths(0), lengths(0), lengths(5), lengths(5), lengths(-1), 9)
    assert guarded.available_size() == 64 and guarded.page_size == 4  # reads go through
    with pytest.raises(kvfuzz.GuardUnsupported, match="more than the trace holds|at most"):
        kvfuzz.guard(ours(size=1 << 21), "allocator")
    allocator.alloc(8)
    with pytest.raises(kvfuzz.GuardUnsupported, match="guard it before its first call"):
        kvfuzz.guard(allocator, "allocator")


def test_a_nested_group_begin_raises_to_the_engine_as_the_class_raises(tmp_path):
    guarded = kvfuzz.guard(ours(), "allocator", corpus=tmp_path)
    guarded.free_group_begin()
    with pytest.raises(Exception, match="nested"):
        guarded.free_group_begin()  # the oracle refuses it too: no divergence
    guarded.free_group_end()
    assert guarded.kvfuzz_session.divergence is None
    assert guarded.kvfuzz_session.ops[1] == Misuse("group_begin_nested")


def test_a_double_free_by_the_engine_is_a_divergence_that_replays(tmp_path):
    guarded = kvfuzz.guard(ours(), "allocator", corpus=tmp_path)
    slots = guarded.alloc(8)
    guarded.free(slots)
    with pytest.raises(kvfuzz.Mismatch, match="double free") as raised:
        guarded.free(slots)
    found = raised.value.divergence
    again = kvfuzz.replay(found.saved_path, "allocator.torch").divergences
    assert [d.signature for d in again] == [found.signature]
