"""`kvfuzz.guard` and `kvfuzz.record` of a live hybrid SWA allocator (fuzz/swa/guard.py): the
allocator's calls by slot, made by kvfuzz's own batch scheduler on kvfuzz's class, on SGLang's
released `SWATokenToKVPoolAllocator` and on every mutant. The guard's verdict on a trace is the
batch judge's; its file (the calls up to the bad one) replays; what the trace cannot model is
refused before the call is made. SGLang's class's tests skip without SGLang."""

import pytest
import torch

import kvfuzz
from kvfuzz.fuzz.swa.target import SWA
from kvfuzz.impl.swa.kvcache import stand_in_kvcache
from kvfuzz.strategies.swa.trace import (ClearMapping, ExtendSlots, ExtendTailSlots,
                                         FreeSegments, FreeSlots, GroupBegin, SetMapping)
from tests import guarding

FAMILIES = {"swa.torch": "mutant.swa.", "sglang.swa": "mutant.sglang.swa."}


@pytest.mark.parametrize("released", guarding.families(FAMILIES, "swa.torch"))
def test_the_guards_verdict_is_the_batch_judges_on_every_mutant(released, tmp_path):
    guarding.assert_every_mutant_of_the_family_caught(SWA, released, FAMILIES[released],
                                                      tmp_path)


@pytest.mark.parametrize("released", guarding.families(FAMILIES, "swa.torch"))
def test_the_released_class_runs_guarded_and_its_record_replays(released, tmp_path):
    guarding.assert_released_runs_guarded_and_its_record_replays(
        SWA, SWA.catalogue.resolve(released), tmp_path, 30)


def ours(page_size: int = 4, size: int = 64, size_swa: int = 32, impl: str = "swa.torch"):
    cls = SWA.catalogue.resolve(impl).load()
    return cls(size, size_swa, page_size, torch.float16, "cpu", stand_in_kvcache(), False)


def lengths(*values):
    return torch.tensor(values, dtype=torch.int64)


def extend(guarded, prefix, seq, last):
    tokens = sum(s - q for q, s in zip(prefix, seq))
    return guarded.alloc_extend(lengths(*prefix), lengths(*prefix), lengths(*seq),
                                lengths(*seq), lengths(*last), tokens)


def test_the_engines_calls_become_by_slot_ops_and_replay(tmp_path):
    guarded = kvfuzz.guard(ours(), "swa", corpus=tmp_path)
    out = extend(guarded, (0, 0), (5, 3), (-1, -1))
    assert out.tolist() == [4, 5, 6, 7, 8, 12, 13, 14]  # the oracle's slots, compared
    tail = guarded.alloc_extend_swa_tail(lengths(0), lengths(0), lengths(8), lengths(8),
                                         lengths(-1), 8, 4)
    guarded.free_group_begin()
    guarded.free_swa_segment(out[:4], start_pos=0)  # the window passes r0's first page
    guarded.free_group_end()
    peer = guarded.full_to_swa_index_mapping[tail[-1:]].clone()  # an attribute: read through
    guarded.clear_full_to_swa_mapping(tail[-1:])  # a prefix cache drops a peer, and re-pairs it
    guarded.set_full_to_swa_mapping(tail[-1:], peer)
    guarded.free_segments([(out[4:5], 4)])
    guarded.free_full(out[:4])
    ops = guarded.kvfuzz_session.ops
    assert ops[0] == ExtendSlots((0, 0), (5, 3), (-1, -1))
    assert ops[1] == ExtendTailSlots(0, 8, -1, 4)
    assert ops[2] == GroupBegin() and ops[3] == FreeSegments((4, 5, 6, 7), (0,), (4,), "swa")
    assert ops[5] == ClearMapping((tail[-1].item(),))
    assert ops[6] == SetMapping((tail[-1].item(),), (peer.item(),))
    assert ops[7] == FreeSegments((8,), (4,), (1,)) and ops[8] == FreeSlots((4, 5, 6, 7), "full")
    assert guarded.kvfuzz_session.divergence is None
    assert kvfuzz.replay(guarded.kvfuzz_session.save(tmp_path / "s"), "swa.torch").ok


def test_what_the_trace_cannot_model_is_refused_before_the_call(tmp_path):
    allocator = ours()
    guarded = kvfuzz.guard(allocator, "swa", corpus=tmp_path)
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"_take_peers\(\) is not modelled"):
        guarded._take_peers(lengths(1))
    with pytest.raises(kvfuzz.GuardUnsupported, match="above page size 1"):
        guarded.alloc(4)
    with pytest.raises(kvfuzz.GuardUnsupported, match="extend_num_tokens 9, its lengths sum "
                                                      "to 5"):
        guarded.alloc_extend(lengths(0), lengths(0), lengths(5), lengths(5), lengths(-1), 9)
    with pytest.raises(kvfuzz.GuardUnsupported, match="outside 0..67"):
        guarded.free(lengths(68))
    assert guarded.available_size() == 32 and guarded.swa_available_size() == 32  # reads
    assert allocator.full_available_size() == 64  # nothing refused reached the allocator
    extend(guarded, (0,), (4,), (-1,))
    with pytest.raises(kvfuzz.GuardUnsupported, match="guard it before its first call"):
        kvfuzz.guard(allocator, "swa")
    with pytest.raises(kvfuzz.GuardUnsupported, match="at page size 1"):
        extend(kvfuzz.guard(ours(page_size=1), "swa"), (0,), (4,), (-1,))


def test_a_window_release_that_misses_its_peers_is_a_divergence_that_replays(tmp_path):
    guarded = kvfuzz.guard(ours(impl="mutant.swa.segment_unmaps_first_slot"), "swa",
                           corpus=tmp_path)
    out = extend(guarded, (0,), (8,), (-1,))
    with pytest.raises(kvfuzz.Mismatch, match="mapping") as raised:
        guarded.free_swa_segment(out[:4], start_pos=0)
    found = raised.value.divergence
    again = kvfuzz.replay(found.saved_path, "mutant.swa.segment_unmaps_first_slot").divergences
    assert [d.signature for d in again] == [found.signature]
    assert kvfuzz.replay(found.saved_path, "swa.torch").ok


def test_a_double_release_by_the_engine_is_a_divergence(tmp_path):
    guarded = kvfuzz.guard(ours(), "swa", corpus=tmp_path)
    out = extend(guarded, (0,), (4,), (-1,))
    guarded.free(out)
    with pytest.raises(kvfuzz.Mismatch, match="twice|double"):
        guarded.free_full(out)


def test_a_release_on_a_pool_past_the_allocator_is_checked_too(tmp_path):
    """SGLang's unified radix cache frees a tree value's full slots on the full pool itself:
    the guard hands its pools out wrapped, their releases ops of the trace, anything else that
    would change them refused."""
    guarded = kvfuzz.guard(ours(), "swa", corpus=tmp_path)
    out = extend(guarded, (0,), (8,), (-1,))
    guarded.free_swa_segment(out, start_pos=0)
    guarded.full_attn_allocator.free_segment(out, start_pos=0)
    assert guarded.kvfuzz_session.ops[-1] == FreeSegments(tuple(out.tolist()), (0,), (8,),
                                                          "full_pool")
    assert guarded.full_attn_allocator.available_size() == 64  # a read, through
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"alloc\(\) is not modelled"):
        guarded.swa_attn_allocator.alloc(4)
    assert kvfuzz.replay(guarded.kvfuzz_session.save(tmp_path / "s"), "swa.torch").ok
    leaked = kvfuzz.guard(ours(), "swa", corpus=tmp_path)
    out = extend(leaked, (0,), (8,), (-1,))
    leaked.full_attn_allocator.free(out)  # the full side only, the peers still mapped: allowed
    with pytest.raises(kvfuzz.Mismatch, match="full slots on the free list keep an SWA peer"):
        extend(leaked, (0,), (4,), (-1,))  # ... until the next call, which does not free them
