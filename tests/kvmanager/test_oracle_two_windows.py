"""The KV-cache-manager oracle over two sliding windows (`Trace.first_window`: a model whose
layers are all sliding window, in two window sizes, two `SlidingWindowSpec` groups under vLLM
0.33.0's hybrid coordinator, no full attention): each window's own frees and events, and the
hit search's fixed point, pass after pass, EAGLE dropping once per candidate length; and the
codec's one-line refusals. Pure Python, no vLLM."""

import pytest

from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.hashing import chain
from kvfuzz.strategies.kvmanager.trace import Trace, to_json
from tests.kvmanager.test_oracle_hybrid import admit

# Group 0: a window of 2 in blocks of 1; group 1: a window of 3 in blocks of 2 (scheduler
# blocks of 2, hashed per token). Each window's run is one block, two with EAGLE's.
SIZES = dict(blocks=40, block_size=1, window=3, max_model_len=100, window_block_size=2,
             hash_block_size=1, first_window=2)
PROMPT = list(range(1, 13))


def test_two_windows_are_two_groups_each_freeing_past_its_own_window():
    model = KVManagerModel(**SIZES, events=True)
    assert model.groups == (0, 1) and model.windows == {0: 2, 1: 3}
    assert model.skipped_tokens(0, 12) == 11 and model.skipped_tokens(1, 12) == 10
    admit(model, 1, PROMPT)
    stored = {(e.group, e.kind, e.window) for e in model.take_events()}
    assert stored == {(0, "sliding_window", 2), (1, "sliding_window", 3)}
    # the next step frees what each window left: 11 blocks of group 0, 5 of group 1
    model.allocate_slots(1, chain(PROMPT + [13], 1), 13, 12, 1, 0, None)
    assert model.freed_by_window == 16
    assert [sum(1 for b in t if b) for t in model.block_ids(1)] == [2, 2]


def _cached_then_cut(eagle: bool) -> KVManagerModel:
    """The prompt cached in both groups, then group 0's block 6 and group 1's block 4 (tokens
    8 and 9) evicted."""
    model = KVManagerModel(**SIZES, eagle=eagle)
    admit(model, 1, PROMPT)
    first, second = model.block_ids(1)
    model.free(1)
    model.evict_blocks({first[6], second[4]})
    return model


def _lookup(model):
    found = model.get_computed_blocks(chain(PROMPT + [98, 99], 1), 14)
    return [len(blocks) for blocks in found[0]], found[1], found[2]


def test_the_search_takes_passes_until_both_windows_keep_the_candidate():
    # Without EAGLE: group 0's run of one ends at 12 (its blocks 10, 11 cached: 12), group 1's
    # at 12 too; one pass keeps the cap's grid point (12 of 13)
    assert _lookup(_cached_then_cut(eagle=False)) == ([12, 6], 12, 0)
    # With EAGLE: pass 1, group 0 looks to 14, its run of two ends at 11 (block 11's right
    # edge off the grid), dropped: 10; group 1 looks to 12, its block 4 gone, its run of two
    # ends at 8, dropped: 6. Pass 2 asks each at 6 without the drop (each dropped once at
    # this candidate): group 0's block 5 and group 1's block 2 are cached, 6 holds. The
    # longest candidate a lookup left, 10, is the shared-prefix boundary.
    model = _cached_then_cut(eagle=True)
    assert _lookup(model) == ([6, 3], 6, 10)
    assert "two windows: the hit search takes another pass" in model.take_marks()


def test_a_search_that_drops_again_at_every_pass_loses_a_block():
    """What vLLM's survivor 902 (`eagle_verified.add(idx)` removed) does, written into the
    oracle: every lookup drops. At pass 2 group 0 would peek at its block 6, gone, and fall
    back to 4; the property above tells it apart."""
    model = _cached_then_cut(eagle=True)
    hashes = chain(PROMPT + [98, 99], 1)
    hit, found = 13, None
    while found != hit:  # every group drops at every pass
        found = hit if found is None else found
        hit = found
        for group in (0, 1):
            limit = min(found + model.sizes[group], len(hashes))
            found = len(model._window_hit(model.group_hashes(hashes, group), limit, group,
                                          True)) * model.sizes[group]
    assert hit == 4 != _lookup(_cached_then_cut(eagle=True))[1]


def _trace(**settings) -> dict:
    return to_json(Trace(8, 2, 5, 64, (), first_window=3)) | settings


def test_the_first_window_round_trips_and_its_refusals_name_the_field():
    trace = from_json(_trace())
    assert trace.first_window == 3 and trace.sizes == (2, 2)
    assert "sliding windows 3 and 5" in trace.describe()
    for bad in (dict(window=0), dict(window=3), dict(lone=True), dict(eagle_groups=[0]),
                dict(prefill_lookahead=2), dict(dcp=2)):
        with pytest.raises(FormatError, match="first_window|lone|eagle_groups|dcp|prefill"):
            from_json(_trace(**bad))
