"""The block-pool oracle on worked examples (vLLM 0.33.0's `BlockPool` source is the contract),
its invariants each shown firing on a broken state, and the trace format: version-stable JSON,
one-line errors. Plain Python: nothing here needs vLLM."""

import pytest

from kvfuzz.oracle.blockpool.model import (REFUSED, BlockPoolModel, FreedTooOften,
                                           state_violations)
from kvfuzz.strategies.blockpool.codec import MAX_BLOCKS, from_json
from tests.helpers import loads
from kvfuzz.strategies.blockpool.generator import generate
from kvfuzz.strategies.blockpool.trace import FORMAT
from tests.helpers import dumps
from kvfuzz.strategies.inputs import FormatError


def _state(model: BlockPoolModel):
    return (list(model.ref), list(model.free), list(model.key),
            {key: list(blocks) for key, blocks in model.map.items()}, dict(model.watched))


def _violations(model: BlockPoolModel) -> list[str]:
    return state_violations(model.size, model.ref, model.free, model.key, model.map)


def test_block_0_is_the_null_block_never_handed_out_counted_or_freed():
    model = BlockPoolModel(4, caching=True)
    assert model.free == [1, 2, 3] and model.num_free() == 3
    assert model.get_new_blocks(3) == [1, 2, 3] and model.num_free() == 0
    model.touch([0, 1])
    model.free_blocks([1, 0, 1])
    assert model.ref == [0, 0, 1, 1] and model.free == [1] and _violations(model) == []


def test_freed_uncached_blocks_go_to_the_head_cached_ones_to_the_tail_in_the_order_given():
    model = BlockPoolModel(7, caching=True)
    assert model.get_new_blocks(4) == [1, 2, 3, 4] and model.free == [5, 6]
    model.cache_full_blocks([10, 11, 12], [1, 2, 3, 4], 0, 2, group=0)  # blocks 1, 2 cached
    model.free_blocks([4, 3, 2, 1])                                    # the manager's order
    assert model.free == [4, 3, 5, 6, 2, 1]
    assert model.get_new_blocks(2) == [4, 3]  # the uncached ones are reused first
    assert model.map == {(10, 0): [1], (11, 0): [2]} and _violations(model) == []


def test_without_caching_every_freed_block_goes_to_the_head():
    model = BlockPoolModel(5, caching=False)
    model.get_new_blocks(2)
    model.free_blocks([2, 1])
    assert model.free == [2, 1, 3, 4]


def test_a_block_handed_out_again_loses_its_cache_entry():
    model = BlockPoolModel(3, caching=True)
    model.get_new_blocks(2)
    model.cache_full_blocks([7, 8], [1, 2], 0, 2, group=1)
    model.free_blocks([2, 1])
    assert model.free == [2, 1] and model.get_new_blocks(1) == [2]
    assert model.key == [None, (7, 1), None] and model.map == {(7, 1): [1]}


def test_asking_for_more_than_the_free_blocks_is_refused_and_changes_nothing():
    model = BlockPoolModel(5, caching=True)
    model.get_new_blocks(2)
    model.cache_full_blocks([3], [1], 0, 1, group=0)
    model.unpin_blocks([2])
    before = _state(model)
    assert model.get_new_blocks(4) == REFUSED == "ValueError"
    assert _state(model) == before and model.heard == []
    assert model.get_new_blocks(3) == [3, 4, 2] and model.heard == [2]  # exactly the free: ok


def test_a_lookup_of_a_hash_cached_twice_returns_the_oldest_still_cached():
    model = BlockPoolModel(5, caching=True)
    model.get_new_blocks(3)
    model.cache_full_blocks([5], [2], 0, 1, group=0)
    model.cache_full_blocks([5], [1], 0, 1, group=0)
    model.cache_full_blocks([5], [3], 0, 1, group=1)
    assert model.map[(5, 0)] == [2, 1]
    assert model.get_cached_block(5, [0]) == [2] and model.get_cached_block(5, [0, 1]) == [2, 3]
    assert model.get_cached_block(5, [2]) is None and model.get_cached_block(6, [0]) is None
    model.evict_blocks({2})
    assert model.get_cached_block(5, [0]) == [1] and model.key[2] is None
    model.evict_blocks({1, 4})  # an uncached block: nothing to evict
    assert model.get_cached_block(5, [0]) is None and (5, 0) not in model.map
    assert model.ref == [0, 1, 1, 1, 0] and _violations(model) == []


def test_caching_skips_null_blocks_and_blocks_before_num_cached():
    model = BlockPoolModel(4, caching=True)
    model.get_new_blocks(2)
    model.cache_full_blocks([1, 2, 3, 4], [1, 0, 2], 1, 3, group=0)
    assert model.key == [None, None, (3, 0), None]
    assert model.map == {(3, 0): [2]} and model.key[0] is None


def test_a_block_named_twice_with_two_references_is_freed_where_its_last_goes():
    model = BlockPoolModel(5, caching=True)
    assert model.get_new_blocks(2) == [1, 2]
    model.touch([1, 2])                  # a connector pins both (vLLM's CPU offloading)
    model.free_blocks([2, 1, 2, 1])      # the request's table, then its pins
    assert model.ref == [0, 0, 0, 0, 0] and model.free == [2, 1, 3, 4]
    assert _violations(model) == []


def test_a_double_free_is_refused_and_changes_nothing():
    model = BlockPoolModel(4, caching=True)
    model.get_new_blocks(2)
    before = _state(model)
    with pytest.raises(FreedTooOften, match=r"block 2 named 2 times with 1 reference\(s\)"):
        model.free_blocks([2, 1, 2])
    assert _state(model) == before
    with pytest.raises(FreedTooOften, match="block 3 named 1 times with 0"):
        model.free_blocks([3])           # a block nobody holds
    model.free_blocks([2, 1, 0, 0])      # null blocks are never counted
    assert model.free == [2, 1, 3]


def test_touch_takes_a_free_cached_block_off_the_queue():
    model = BlockPoolModel(4, caching=True)
    model.get_new_blocks(1)
    model.cache_full_blocks([9], [1], 0, 1, group=0)
    model.free_blocks([1])
    assert model.free == [2, 3, 1]
    model.touch([1])
    assert model.free == [2, 3] and model.ref[1] == 1 and model.key[1] == (9, 0)


def test_unpinned_blocks_go_to_the_tail_and_the_watcher_hears_of_their_reuse():
    model = BlockPoolModel(5, caching=True)
    assert model.get_new_blocks(2) == [1, 2]
    model.touch([1])
    model.unpin_blocks([1, 2])  # block 1 is still held once: it stays off the queue
    assert model.free == [3, 4, 2] and model.ref[1] == 1 and list(model.watched) == [1, 2]
    assert model.get_new_blocks(2) == [3, 4] and model.heard == []
    assert model.get_new_blocks(1) == [2] and model.heard == [2]
    assert list(model.watched) == [1]
    model.free_blocks([1, 2, 3, 4])
    assert model.free == [1, 2, 3, 4] and model.reset_prefix_cache() is True
    assert model.heard == [1] and model.watched == {}


def test_a_reset_is_refused_while_any_block_is_held_and_then_clears_everything():
    model = BlockPoolModel(4, caching=True)
    model.get_new_blocks(2)
    model.cache_full_blocks([1, 2], [1, 2], 0, 2, group=0)
    model.free_blocks([2])
    before = _state(model)
    assert model.reset_prefix_cache() is False and _state(model) == before
    model.free_blocks([1])
    assert model.reset_prefix_cache() is True
    assert model.map == {} and model.key == [None] * 4 and model.free == [3, 2, 1]


def test_a_consistent_state_has_no_violations():
    model = BlockPoolModel(6, caching=True)
    model.get_new_blocks(3)
    model.cache_full_blocks([4, 5], [1, 2], 0, 2, group=0)
    model.free_blocks([2])
    assert _violations(model) == []


CLEAN = dict(size=5, ref=[0, 1, 0, 0, 0], free=[2, 3, 4], keys=[None, (9, 0), None, None, None],
             cache={(9, 0): [1]})


@pytest.mark.parametrize("change, shows", [
    ({"free": [0, 2, 3, 4], "ref": [0, 1, 0, 0, 0]}, "the null block (0) is on the free queue"),
    ({"free": [2, 3, 3, 4]}, "blocks twice on the free queue: [3]"),
    ({"free": [2, 3, 4, 7]}, "blocks outside 0..4 on the free queue: [7]"),
    ({"ref": [0, 1, -1, 0, 0], "free": [3, 4]}, "negative reference counts: block 2 has -1"),
    ({"free": [2, 3]}, "1 blocks with no reference are not on the free queue (lost), e.g. [4]"),
    ({"free": [1, 2, 3, 4]}, "1 blocks with references are on the free queue, e.g. block 1 "
                             "with 1"),
    ({"keys": [(9, 0), (9, 0), None, None, None], "cache": {(9, 0): [1, 0]}},
     "the null block (0) is cached under (9, 0)"),
    ({"cache": {(9, 0): [1], (8, 1): [2]}},
     "the cache maps hash 8 (group 1) to block 2, whose own hash is None"),
    ({"cache": {}}, "block 1 has hash 9 (group 0) but the cache does not map it there"),
])
def test_each_invariant_fires_on_a_broken_state(change, shows):
    assert state_violations(**CLEAN) == []
    found = state_violations(**{**CLEAN, **change})
    assert any(shows in problem for problem in found), found


def test_generated_traces_round_trip():
    for index in range(10):
        trace = generate(0, index)
        assert loads(dumps(trace)) == trace and len(trace.ops) == 200
        assert 2 <= trace.blocks <= 64


GOOD = {"format": FORMAT, "blocks": 8, "caching": True,
        "ops": [{"op": "alloc", "rid": 1, "count": -2, "relative": True},
                {"op": "cache", "rid": 1, "hashes": [1, 2]}, {"op": "free", "rids": [1]},
                {"op": "probe", "hashes": [1], "groups": [0, 1]}, {"op": "reset"}]}


def test_a_good_trace_decodes():
    trace = from_json(GOOD)
    assert trace.ops[0].count == -2 and trace.ops[2].reverse and trace.ops[3].groups == (0, 1)
    assert loads(dumps(trace)) == trace


@pytest.mark.parametrize("change, field, value", [
    ({"format": "kvfuzz-mamba-trace/1"}, "format", "'kvfuzz-mamba-trace/1'"),
    ({"blocks": 0}, "blocks", "0"),
    ({"blocks": MAX_BLOCKS + 1}, "blocks", str(MAX_BLOCKS + 1)),
    ({"caching": 1}, "caching", "1"),
    ({"slots": 3}, "slots", "3"),
    ({"ops": [{"op": "alloc", "rid": 1, "count": -1}]}, "ops[0].count", "-1"),
    ({"ops": [{"op": "alloc", "count": 1}]}, "ops[0].rid", "None"),
    ({"ops": [{"op": "cache", "rid": 1, "hashes": [1, "x"]}]}, "ops[0].hashes[1]", "'x'"),
    ({"ops": [{"op": "probe", "hashes": [1], "groups": [8]}]}, "ops[0].groups[0]", "8"),
    ({"ops": [{"op": "lookup", "rid": 1, "hashes": [], "group": -1}]}, "ops[0].group", "-1"),
    ({"ops": [{"op": "free", "rids": [1], "reverse": "yes"}]}, "ops[0].reverse", "'yes'"),
    ({"ops": [{"op": "evict", "block_ids": [2**31 + 1]}]}, "ops[0].block_ids[0]", "2147483649"),
    ({"ops": [{"op": "defrag"}]}, "ops[0].op", "'defrag'"),
])
def test_malformed_traces_name_the_field_and_the_value(change, field, value):
    with pytest.raises(FormatError) as error:
        from_json({**GOOD, **change}, source="b.json")
    assert f"b.json: field '{field}'" in str(error.value) and value in str(error.value)
