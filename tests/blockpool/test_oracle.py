"""The block-pool oracle on worked examples (vLLM 0.33.0's `BlockPool` source is the contract),
its invariants each shown firing on a broken state, and the trace format: version-stable JSON,
one-line errors. Plain Python: nothing here needs vLLM."""

import pytest

from collections import Counter

from kvfuzz.oracle.blockpool.events import canonical, event_violations, replay
from kvfuzz.oracle.blockpool.invariants import state_violations
from kvfuzz.oracle.blockpool.model import REFUSED, BlockPoolModel, FreedTooOften
from kvfuzz.strategies.blockpool.events import Cleared, Prompt, Removed, Stored
from kvfuzz.strategies.blockpool.codec import MAX_BLOCKS, from_json
from tests.helpers import loads
from kvfuzz.strategies.blockpool.generator import generate
from kvfuzz.strategies.blockpool.trace import FORMAT
from tests.helpers import dumps
from kvfuzz.strategies.inputs import FormatError


def _state(model: BlockPoolModel):
    return (list(model.ref), list(model.free), list(model.key),
            {key: list(blocks) for key, blocks in model.map.items()}, dict(model.watched))


def _prompt(*hashes: int) -> Prompt:
    """A request with these hashes (one per 16 tokens, the model's default hash block)."""
    return Prompt(hashes, tuple(h for h in hashes for _ in range(16)))


def _violations(model: BlockPoolModel) -> list[str]:
    entries = [model.entries(block) for block in range(model.size)]
    return state_violations(model.size, model.ref, model.free, entries, model.map)


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
    model.cache_full_blocks(_prompt(10, 11, 12), [1, 2, 3, 4], 0, 2, 0, 16)  # blocks 1, 2 cached
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
    model.cache_full_blocks(_prompt(7, 8), [1, 2], 0, 2, 1, 16)
    model.free_blocks([2, 1])
    assert model.free == [2, 1] and model.get_new_blocks(1) == [2]
    assert model.key == [None, (7, 1), None] and model.map == {(7, 1): [1]}


def test_asking_for_more_than_the_free_blocks_is_refused_and_changes_nothing():
    model = BlockPoolModel(5, caching=True)
    model.get_new_blocks(2)
    model.cache_full_blocks(_prompt(3), [1], 0, 1, 0, 16)
    model.unpin_blocks([2])
    before = _state(model)
    assert model.get_new_blocks(4) == REFUSED == "ValueError"
    assert _state(model) == before and model.heard == []
    assert model.get_new_blocks(3) == [3, 4, 2] and model.heard == [2]  # exactly the free: ok


def test_a_lookup_of_a_hash_cached_twice_returns_the_oldest_still_cached():
    model = BlockPoolModel(5, caching=True)
    model.get_new_blocks(3)
    model.cache_full_blocks(_prompt(5), [2], 0, 1, 0, 16)
    model.cache_full_blocks(_prompt(5), [1], 0, 1, 0, 16)
    model.cache_full_blocks(_prompt(5), [3], 0, 1, 1, 16)
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
    model.cache_full_blocks(_prompt(1, 2, 3, 4), [1, 0, 2], 1, 3, 0, 16)
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
    model.cache_full_blocks(_prompt(9), [1], 0, 1, 0, 16)
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
    model.cache_full_blocks(_prompt(1, 2), [1, 2], 0, 2, 0, 16)
    model.free_blocks([2])
    before = _state(model)
    assert model.reset_prefix_cache() is False and _state(model) == before
    model.free_blocks([1])
    assert model.reset_prefix_cache() is True
    assert model.map == {} and model.key == [None] * 4 and model.free == [3, 2, 1]


def test_a_consistent_state_has_no_violations():
    model = BlockPoolModel(6, caching=True)
    model.get_new_blocks(3)
    model.cache_full_blocks(_prompt(4, 5), [1, 2], 0, 2, 0, 16)
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
        assert 1 <= trace.blocks <= 64  # (1: the null block alone, one pool in 25)


def test_a_few_pools_are_past_cpythons_small_ints():
    """blockpool/4: some pools of 258 blocks and more, where a block count is a fresh int object
    (the free queue's construction compares counts: `is not` for `<` there links the last block
    past the list), and the rest at most 64 (each op compares every block)."""
    sizes = [generate(0, index).blocks for index in range(300)]
    large = [size for size in sizes if size > 64]
    assert 1 <= len(large) <= 15 and all(258 <= size <= 300 for size in large), large


GOOD = {"format": FORMAT, "blocks": 8, "caching": True,
        "ops": [{"op": "alloc", "rid": 1, "count": -2, "relative": True},
                {"op": "cache", "rid": 1, "hashes": [1, 2]}, {"op": "free", "rids": [1]},
                {"op": "probe", "hashes": [1], "groups": [0, 1]}, {"op": "reset"}]}


def test_settings_and_later_fields_are_written_only_when_set():
    """A trace at the defaults reads as a file written before the settings existed (its
    content id, hence its corpus file name, unchanged); set, they round-trip."""
    assert "scale" not in dumps(from_json(GOOD)) and '"skip"' not in dumps(from_json(GOOD))
    rich = from_json({**GOOD, "scale": 2, "hash_block_size": 4, "events": True, "lookahead": 2,
                      "salt": True, "report": True, "images": [[0, 3], [5, 2]],
                      "metrics": True, "ops": GOOD["ops"] + [
                          {"op": "cache", "rid": 1, "hashes": [1, 2], "skip": [1]},
                          {"op": "cache_partial", "rid": 1, "units": 3, "hashes": [1, 2, 3]},
                          {"op": "move", "rid": 1, "index": 0, "dst": 2}]})
    assert rich.block_size == 8 and rich.images == ((0, 3), (5, 2)) and rich.ops[5].skip == (1,)
    assert loads(dumps(rich)) == rich


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
    ({"scale": 0}, "scale", "0"),
    ({"hash_block_size": 257}, "hash_block_size", "257"),
    ({"events": "on"}, "events", "'on'"),
    ({"images": [[3, 0]]}, "images[0]", "(3, 0)"),
    ({"images": [[3, 4], [5, 1]]}, "images[1]", "(5, 1)"),
    ({"ops": [{"op": "cache_partial", "rid": 1, "units": -1, "hashes": []}]}, "ops[0].units",
     "-1"),
    ({"ops": [{"op": "move", "rid": 1, "index": 0}]}, "ops[0].dst", "None"),
])
def test_malformed_traces_name_the_field_and_the_value(change, field, value):
    with pytest.raises(FormatError) as error:
        from_json({**GOOD, **change}, source="b.json")
    assert f"b.json: field '{field}'" in str(error.value) and value in str(error.value)


# Partial entries, copies, KV events and metrics (vLLM's configurations beyond one hash unit a
# block: docs/upstream-vllm.md).
def _events_model(blocks: int = 6, **kwargs) -> BlockPoolModel:
    return BlockPoolModel(blocks, caching=True, hash_block_size=2, events=True, **kwargs)


def _units(*hashes: int, salt=False, images=()) -> Prompt:
    """A request whose hash units are 2 tokens each, its tokens its hashes."""
    return Prompt(hashes, tuple(h for h in hashes for _ in range(2)), salt, images)


def test_a_cached_block_of_two_units_takes_its_last_units_hash_and_publishes_it():
    model = _events_model()
    model.get_new_blocks(3)
    model.cache_full_blocks(_units(7, 8, 9, 10, 11), [1, 2, 3], 0, 2, 0, block_size=4)
    assert model.key[1:4] == [(8, 0), (10, 0), None] and model.tokens[1:3] == [4, 8]
    assert model.take_events() == [Stored((8, 10), None, (7, 7, 8, 8, 9, 9, 10, 10), 4, 0,
                                   (None, None))]
    model.cache_full_blocks(_units(7, 8, 9, 10, 11, 12), [1, 2, 3], 2, 3, 0, block_size=4)
    assert model.take_events() == [Stored((12,), 10, (11, 11, 12, 12), 4, 0, (None,))]


def test_a_partial_entry_is_primary_or_extra_and_a_longer_one_supersedes_it():
    model = _events_model()
    model.get_new_blocks(2)
    assert model.cache_partial_block(_units(5, 6, 7), 2, 3, 0, 4) == (7, 0)  # block 2: units 3
    assert model.key[2] == (7, 0) and model.tokens[2] == 6
    assert model.take_events() == [Stored((7,), 6, (7, 7), 2, 0, (None,))]
    assert model.cache_partial_block(_units(5, 6, 7), 2, 3, 0, 4) == (7, 0)
    assert model.take_events() == []                 # already there: not published again
    model.cache_partial_block(_units(5, 6, 7, 8), 2, 4, 0, 4)  # a longer tail
    assert model.entries(2) == (8, 0) and model.tokens[2] == 8
    assert model.take_events() == [Removed((7,), 0), Stored((8,), 7, (8, 8), 2, 0, (None,))]
    model.cache_partial_block(_units(5, 9), 2, 2, 0, 4)        # shorter: kept as an extra
    assert model.entries(2) == [(8, 0), (9, 0)] and model.map[(9, 0)] == [2]
    model.cache_partial_block(_units(5, 3), 2, 2, 1, 4, replace=True)
    assert model.entries(2) == (3, 1) and model.tokens[2] == 4
    assert _violations(model) == []


def test_a_partial_block_is_promoted_when_full_and_a_copy_takes_its_entries():
    model = _events_model()
    model.get_new_blocks(2)
    model.cache_partial_block(_units(5, 6, 7), 2, 3, 0, 4)
    assert len(model.take_events()) == 1   # events wait in a queue until taken
    model.cache_full_blocks(_units(5, 6, 7, 8), [1, 2], 1, 2, 0, block_size=4)
    assert model.entries(2) == (8, 0) and model.tokens[2] == 8 and (7, 0) not in model.map
    assert model.take_events() == [Removed((7,), 0), Stored((8,), 6, (7, 7, 8, 8), 4, 0, (None,))]
    model.cache_partial_block(_units(4, 9), 2, 2, 0, 4)
    assert model.get_new_blocks(1) == [3] and len(model.take_events()) == 1
    model.move_block_hashes(2, 3)
    assert model.entries(3) == [(8, 0), (9, 0)] and model.tokens[3] == 8
    assert model.key[2] is None and model.take_events() == [] and model.map[(8, 0)] == [3]
    assert model.writable() == [1, 2] and _violations(model) == []  # one reference, no hash


def test_events_carry_extra_keys_lookahead_removals_and_a_reset():
    model = _events_model(lookahead=1)
    model.get_new_blocks(2)
    model.cache_full_blocks(_units(1, 2, 3, salt=True, images=((1, 2),)), [1, 2], 0, 2, 0, 2)
    (event,) = model.take_events()
    # the image (tokens 1-2) overlaps block 0 at offset 1 and block 1 from before its start
    assert event.extra_keys == ((("kvfuzz-image-0", 1), "kvfuzz-salt"),
                                (("kvfuzz-image-0", -1),))
    assert event.lookahead == ((2,), (3,))
    model.emit_cached_block_events(_units(1, 2, images=((3, 1),)), 1, 2, 0)
    assert model.take_events() == [Stored((1,), None, (1, 1), 2, 0, (None,), ((2,),))]
    model.free_blocks([2, 1])
    assert model.get_new_blocks(4) == [3, 4, 5, 2]  # reuses block 2, evicting hash 2
    assert model.take_events() == [Removed((2,), 0)]
    model.free_blocks([2, 3, 4, 5])
    assert model.reset_prefix_cache() is True and model.take_events() == [Cleared()]


def test_usage_and_residency_metrics():
    model = BlockPoolModel(5, caching=True, metrics=True)
    assert model.get_usage() == 0.0 and BlockPoolModel(1, True).get_usage() == 0
    model.get_new_blocks(2)
    model.touch([1, 1])
    assert model.get_usage() == 0.5 and model.tracked == {1: 2, 2: 0}
    model.evict_blocks({1, 3})
    assert model.take_evictions() == [1] and model.tracked == {2: 0}
    model.free_blocks([2, 1, 1, 1])
    model.get_new_blocks(4)                          # block 2 is tracked again from 0
    assert model.take_evictions() == [0] and set(model.tracked) == {1, 2, 3, 4}


def test_a_consumer_of_the_events_believes_what_the_pool_holds():
    view = replay(Counter(), [Stored((8, 9), None, (), 4, 0), Stored((8,), None, (), 4, 0),
                              Removed((9,), 0)])
    assert view == Counter({(8, 0): 2})
    assert event_violations(view, {(8, 0): [1, 2]}) == []
    assert event_violations(view, {(8, 0): [1]}) == [
        "the KV events say hash 8 (group 0) is cached in 2 block(s), the pool's map holds it "
        "in 1"]
    assert replay(view, [Cleared()]) == Counter()
    removals = [Removed((9,), 0), Removed((8,), 1), Removed((8,), 0)]
    assert canonical([Cleared(), *removals, Cleared()])[1:4] == sorted(
        removals, key=lambda e: (e.hashes, e.group))


def test_an_extra_entry_unmapped_is_an_invariant_violation():
    keys = [None, [(9, 0), (4, 1)], None, None, None]
    assert state_violations(**{**CLEAN, "keys": keys, "cache": {(9, 0): [1], (4, 1): [1]}}) == []
    found = state_violations(**{**CLEAN, "keys": keys})
    assert any("block 1 has hash 4 (group 1) but the cache does not map it" in f for f in found)


@pytest.mark.parametrize("change, shows", [
    ({"free": [2, 3, 3, 4]}, "blocks twice on the free queue: [3]"),
    ({"cache": {}}, "block 1 has hash 9 (group 0) but the cache does not map it there"),
    ({"keys": [None, [(9, 0)], None, None, None]}, None),  # a list of one entry: no change
])
def test_a_lock_step_skips_the_invariants_of_the_state_it_saw_hold_only(change, shows):
    """`pool_state._invariants`: a state == the one the lock step saw hold at its read before
    is not checked again (the same answer); any other is, a broken one reported; the state held
    is a copy (a driver that changes a list it handed out is still checked)."""
    from types import SimpleNamespace

    from kvfuzz.fuzz.blockpool import pool_state

    lock, calls = SimpleNamespace(), []
    real = pool_state.state_violations

    def counted(*args):
        calls.append(args)
        return real(*args)

    args = lambda state: (lock, state["size"], state["ref"], state["free"], state["keys"],  # noqa: E731
                          state["cache"])
    pool_state.state_violations = counted
    try:
        state = {**CLEAN, "free": list(CLEAN["free"])}
        assert pool_state._invariants(*args(state)) == []
        assert pool_state._invariants(*args(dict(state))) == [] and len(calls) == 1
        state["free"].append(2)  # the list handed out changed in place: checked again
        assert pool_state._invariants(*args(state)) and len(calls) == 2
        found = pool_state._invariants(*args({**CLEAN, **change}))
        assert len(calls) == 3
        assert (found == []) if shows is None else any(shows in p for p in found), found
        assert pool_state._invariants(*args({**CLEAN, **change})) == found  # a broken one: again
    finally:
        pool_state.state_violations = real


def test_the_prefix_stats_tuple_is_every_field_in_order():
    from dataclasses import astuple

    from kvfuzz.oracle.kvmanager.stats import PrefixStats

    stats = PrefixStats()
    stats.record(10, 4, False)
    stats.record(7, 3, True)
    stats.reset = True
    assert stats.as_tuple() == astuple(stats) == (1, 10, 4, 1, 7, 3, True)
