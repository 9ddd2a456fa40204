"""Mamba "align" boundary-state hand-offs (`fuzz/kvmanager/boundary.py`): the check on plain data
(quick: each way an offer can be wrong, and a block cached at a boundary but not offered), then
the released `KVCacheManager` on the "mamba align" traces, which offers states and agrees, and
test doubles each breaking one side of `take_boundary_state_offloads` (offering nothing: what
the mutant `kv_cache_manager:900:17:ZeroIterationForLoop:11` does; the wrong boundary, block or
group; a finished producer's partial tail not handed off, or the wrong block), each caught by
the seeded traces (slow: they import vLLM)."""

from __future__ import annotations

import functools

import pytest

from kvfuzz.fuzz.kvmanager.boundary import offload_problems, tail_keyed, tail_problems
from kvfuzz.oracle.kvmanager.mamba_align import hit_key
from kvfuzz.strategies.kvmanager import hybrid
from tests.helpers import divergence, with_engine


class _Request:
    """What the check reads of the lock step's request: computed tokens and hashes per unit."""

    def __init__(self, computed: int, units: list[int]):
        self.computed, self.units = computed, units

    def hashes(self, hash_size: int, lookahead: int = 0) -> list[int]:
        return self.units


# r1 has computed 8 tokens in blocks of 4, hashed per 2 tokens (4 units); its Mamba state at the
# 8-token boundary is block 3, cached this op under its hash of 8 tokens.
UNITS = [11, 12, 13, 14]
BEFORE = [None, ("x", 0), None, None, None]
AFTER = [None, ("x", 0), None, hit_key(UNITS, 8, 2), None]
GOOD = [(1, 1, 3, 8)]


def check(offloads, rid=1, computed=8, after=AFTER, since=0):
    return offload_problems(offloads, rid, _Request(computed, UNITS), BEFORE, after, 4, 2,
                            since)


def test_the_offer_of_a_state_cached_at_a_boundary_passes():
    assert check(GOOD) == []
    assert offload_problems(None, 1, _Request(8, UNITS), BEFORE, AFTER, 4, 2) == []  # no method


@pytest.mark.parametrize("offloads, says", [
    ([], "block 3 was cached this op as r1's Mamba state at 8 tokens"),
    ([(2, 1, 3, 8)], "not of the request this op stepped"),
    ([(1, 0, 3, 8)], "names group 0"),
    ([(1, 1, 0, 8)], "names block 0"),
    ([(1, 1, 3, 7)], "a boundary of 7 tokens"),
    ([(1, 1, 3, 12)], "a boundary of 12 tokens"),
    ([(1, 1, 3, 4)], "not cached under r1's hash of its first 4 tokens"),
    ([(1, 1, 2, 8)], "names block 2, which is not cached"),
    ([(1, 1, 3)], "is not (request, group, block, boundary tokens)"),
], ids=["nothing", "other request", "group", "null block", "off the hash grid", "past computed",
        "wrong boundary", "wrong block", "malformed"])
def test_each_wrong_offer_is_named(offloads, says):
    problems = check(offloads)
    assert len(problems) == 1 and problems[0][0] == "boundary offload", problems
    assert says in problems[0][1], problems


def test_a_boundary_cached_before_the_op_is_not_expected_again():
    """A state block whose entry an eviction dropped, keyed again at the same boundary (the
    release's partial-tail path does that), is not offered again: only boundaries past what the
    request had cached are expected."""
    assert check([], since=8) == [] and check([], since=9) == []
    assert check([], since=7)  # the boundary 8 is past 7: expected


def test_a_partial_entry_is_not_expected_offered():
    """A state cached inside a block (a partial tail) is handed off only by its copy-on-write:
    not expected at the op that cached it."""
    after = [None, ("x", 0), None, hit_key(UNITS, 6, 2), None]
    assert check([], computed=6, after=after) == []


def test_the_copy_of_a_tail_whose_entry_was_evicted_passes_and_nothing_else_does():
    """`mamba align` traces 2268 and 2306: the step before cached r1's partial tail at 6 tokens,
    `evict_blocks` dropped that entry, and this op's copy-on-write copy (block 2, the right
    state, cached under no hash since there was no entry to move) is offered at 6 tokens. Let
    through only so: copies taken, that tail's tokens, a block under no entry, outside the
    request's Mamba table."""
    def copied(entry, evicted_tail=6, table=(3,), after=AFTER):
        return offload_problems([entry], 1, _Request(8, UNITS), BEFORE, after, 4, 2, 8,
                                evicted_tail, table)

    assert copied((1, 1, 2, 6)) == []
    assert copied((1, 1, 2, 6), evicted_tail=None)  # no copies taken this op
    assert copied((1, 1, 2, 4), evicted_tail=4)  # a block boundary: never a partial tail
    assert copied((1, 1, 2, 6), evicted_tail=2)  # another boundary than the tail's
    assert copied((1, 1, 2, 6), table=(2, 3))  # the request's own state block
    cached_else = [None, ("x", 0), ("y", 1), hit_key(UNITS, 8, 2), None]
    assert copied((1, 1, 2, 6), after=cached_else)  # cached under another entry


def test_an_op_of_no_request_offers_nothing():
    assert offload_problems([], None, None, BEFORE, AFTER, 4, 2) == []
    problems = offload_problems(GOOD, None, None, BEFORE, AFTER, 4, 2)
    assert problems and "not of the request this op stepped" in problems[0][1]


# r2 finishes at 6 computed tokens (blocks of 4, hashed per 2); its last step cached its partial
# tail: the last block of its Mamba table, 4, under its hash of 6 tokens: handed off at finish.
TAIL_KEYS = [None, None, None, None, [("x", 0), hit_key(UNITS, 6, 2)]]


def tail(entries, computed=6, keyed=True, table=(0, 4)):
    return tail_problems(entries, 2, _Request(computed, UNITS), list(table), keyed, 4, 2)


def test_a_step_that_caches_its_partial_tail_is_seen():
    assert tail_keyed(_Request(6, UNITS), [0, 4], TAIL_KEYS, 4, 2)
    assert not tail_keyed(_Request(6, UNITS), [0, 3], TAIL_KEYS, 4, 2)     # another block
    assert not tail_keyed(_Request(8, UNITS), [0, 4], TAIL_KEYS, 4, 2)     # a block boundary
    assert not tail_keyed(_Request(6, UNITS), [0, 4], [None] * 5, 4, 2)    # nothing cached


def test_a_finished_producer_hands_its_tail_off_once():
    assert tail([(1, 4, 6)]) == []
    assert tail(None) == []                                              # no such method
    assert tail([], keyed=False) == []                                   # no tail cached


@pytest.mark.parametrize("entries, says", [
    ([], "expected [(1, 4, 6)]"),
    ([(0, 4, 6)], "names group 0"),
    ([(1, 4, 4)], "a boundary of 4 tokens"),
    ([(1, 3, 6)], "names block 3"),
    ([(1, 4, 6), (1, 4, 6)], "expected [(1, 4, 6)]"),
    ([(1, 4, 6)], "expected nothing"),
    ([(1, 4)], "is not (group, block, boundary tokens)"),
], ids=["nothing", "group", "boundary", "block", "twice", "none cached", "malformed"])
def test_each_wrong_tail_is_named(entries, says):
    problems = tail(entries, keyed=says != "expected nothing")
    assert len(problems) == 1 and problems[0][0] == "boundary offload", problems
    assert "finalize_partial_tail_offloads(r2)" in problems[0][1] and says in problems[0][1]


# -- the released class and doubles of it -----------------------------------------------------
INDICES = 100  # of the "mamba align" stream: a finished producer's tail is rarer than offers
with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking the hand-offs one way (built on first
    use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    def edited(edit):
        def take_boundary_state_offloads(self):
            return {rid: [edit(*entry) for entry in entries] for rid, entries in
                    KVCacheManager.take_boundary_state_offloads(self).items()}
        return take_boundary_state_offloads

    class OffersNothing(KVCacheManager):  # the ZeroIterationForLoop mutant at line 900
        def take_boundary_state_offloads(self):
            super().take_boundary_state_offloads()
            return {}

    class OffersBoundaryPlusOne(KVCacheManager):
        take_boundary_state_offloads = edited(lambda g, b, t: (g, b, t + 1))

    class OffersBlockBefore(KVCacheManager):
        take_boundary_state_offloads = edited(lambda g, b, t: (g, b - 1, t))

    class OffersGroupZero(KVCacheManager):
        take_boundary_state_offloads = edited(lambda g, b, t: (0, b, t))

    class TailNotHandedOff(KVCacheManager):  # as the ZeroIterationForLoop mutant at line 917
        def finalize_partial_tail_offloads(self, request):
            super().finalize_partial_tail_offloads(request)
            return []

    class TailBlockBefore(KVCacheManager):
        def finalize_partial_tail_offloads(self, request):
            return [(g, b - 1, t) for g, b, t in super().finalize_partial_tail_offloads(request)]
    return {cls.__name__: cls for cls in (OffersNothing, OffersBoundaryPlusOne,
                                          OffersBlockBefore, OffersGroupZero, TailNotHandedOff,
                                          TailBlockBefore)}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_boundary:OffersNothing
    if name in ("OffersNothing", "OffersBoundaryPlusOne", "OffersBlockBefore",
                "OffersGroupZero", "TailNotHandedOff", "TailBlockBefore"):
        return doubles()[name]
    raise AttributeError(name)


@with_vllm
def test_the_released_class_offers_states_and_agrees():
    from kvfuzz.fuzz.engine.target import AGREE
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    vllm, offered, tails = KVMANAGER.catalogue.resolve("vllm.kvmanager"), 0, 0
    for index in range(INDICES):
        outcome = KVMANAGER.check(hybrid.MAMBA_ALIGN.generate(0, index), vllm)
        assert outcome.status == AGREE, outcome.divergence and outcome.divergence.report()
        offered += bool(outcome.features["boundary states offered"])
        tails += outcome.features["partial tail handed off at finish"]
    assert offered >= 10 and tails >= 1, (offered, tails)
    # trace 476: a state block evicted, then keyed again at its boundary, not offered again
    outcome = KVMANAGER.check(hybrid.MAMBA_ALIGN.generate(0, 476), vllm)
    assert outcome.status == AGREE, outcome.divergence and outcome.divergence.report()


@with_vllm
@pytest.mark.parametrize("broken, says", [
    ("OffersNothing", "not offered"),
    ("OffersBoundaryPlusOne", "has a boundary of"),
    ("OffersBlockBefore", "which is not cached under"),
    ("OffersGroupZero", "names group 0"),
    ("TailNotHandedOff", "finalize_partial_tail_offloads(r"),
    ("TailBlockBefore", "finalize_partial_tail_offloads(r"),
])
def test_each_broken_hand_off_is_caught(broken, says):
    found = next(d for d in (divergence("kvmanager", hybrid.MAMBA_ALIGN.generate(0, index),
                                        f"{__name__}:{broken}") for index in range(INDICES))
                 if d)
    assert found.what.startswith("boundary offload") and says in found.report(), found.report()


@with_vllm
def test_the_corpus_file_of_a_finished_tail_kills_the_hand_off_left_out():
    """`corpus/kvmanager-764f42327bee6d9d.json` (3 ops: a 2-token prompt in blocks of 2, hashed
    per token, prefilled 1 token, finished): the released class hands off its tail; a class
    that hands off nothing diverges at the finish."""
    from pathlib import Path

    from tests.helpers import loads

    path = Path(__file__).parents[2] / "corpus" / "kvmanager-764f42327bee6d9d.json"
    trace = loads(path.read_text(), str(path))
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, f"{__name__}:TailNotHandedOff")
    assert found and "finalize_partial_tail_offloads(r13): expected [(1, 2, 1)]" in \
        found.report(), found and found.report()
