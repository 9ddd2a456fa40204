"""The offload oracle on worked examples (vLLM 0.33.0's CPU offloading manager and its LRU and ARC
policies are the contract): lookups, pins, stores refused and failed, events, the store
threshold, stats; LRU's ranks (tails first, touches, recency while pinned); ARC's lists, ghosts,
adaptive target and its fallback to T1. No vLLM needed."""

from kvfuzz.oracle.offload.model import (FAILED, HIT, HIT_PENDING, MISS, REMOVED, STORED,
                                         OffloadModel)
from kvfuzz.strategies.offload.trace import position, request_keys


def manager(policy="lru", chunks=3, threshold=1, tracker=64_000) -> OffloadModel:
    return OffloadModel(policy, chunks, True, threshold, tracker)


def new(model: OffloadModel, rid: int, hashes, positioned=True, groups=1):
    keys = request_keys(hashes, groups, 0, len(hashes))
    where = [position(i) for _ in range(groups) for i in range(len(hashes))]
    model.new_request(rid, keys, where if positioned else None)
    return keys


def stored(model: OffloadModel, rid: int, hashes, positioned=True):
    """A request whose chunks are stored in one call and completed."""
    keys = new(model, rid, hashes, positioned)
    assert model.prepare_store(rid, keys)[0] == keys
    model.complete_store(rid, keys)
    return keys


# -- the manager ----------------------------------------------------------------------------
def test_lookup_says_miss_pending_or_hit_and_changes_nothing():
    model = manager()
    a, b, c = new(model, 1, (1, 2, 3))
    assert model.prepare_store(1, [a, b]) == ([a, b], [])
    assert model.lookup(1, [a, b, c]) == [HIT_PENDING, HIT_PENDING, MISS]
    model.complete_store(1, [a])
    assert model.lookup(1, [a, b, c]) == [HIT, HIT_PENDING, MISS]
    assert model.contents() == [(a, 0), (b, -1)]


def test_a_store_evicts_what_it_needs_and_never_a_chunk_in_use_or_offered():
    model = manager(chunks=3)
    a, b, c = stored(model, 1, (1, 2, 3))           # LRU: c, then b, then a (tail first)
    d, e = new(model, 2, (4, 5))
    model.prepare_load(2, [c])                      # c pinned by a load
    assert model.prepare_store(2, [b, d]) == ([d], [a])  # c in use, b offered: a goes
    assert model.prepare_store(2, [e]) == ([e], [b])
    assert model.contents() == [(c, 1), (d, -1), (e, -1)]


def test_a_refused_store_changes_no_chunk():
    model = manager(chunks=2)
    a, b = new(model, 1, (1, 2))
    assert model.prepare_store(1, [a, b]) == ([a, b], [])
    c, = new(model, 2, (3,))
    assert model.prepare_store(2, [c]) is None      # everything in flight
    assert model.contents() == [(a, -1), (b, -1)] and model.take_events() == []
    model.complete_store(1, [a, b])
    model.prepare_load(2, [a])
    assert model.prepare_store(2, [c, b]) is None   # a pinned, b offered: nothing evictable
    assert model.prepare_store(2, [c]) == ([c], [b])


def test_a_failed_store_leaves_the_cache_with_a_metadata_only_removal():
    model = manager()
    a, b = new(model, 1, (1, 2))
    model.prepare_store(1, [a, b])
    model.complete_store(1, [a, b], success=False)
    assert model.lookup(1, [a, b]) == [MISS, MISS] and model.contents() == []
    c, = new(model, 2, (1,))                        # another request stores a again
    model.prepare_store(2, [c])
    assert model.take_events() == [(FAILED, [b])]   # a is back: its removal is not told


def test_events_say_what_was_stored_and_evicted_and_outlive_a_reset():
    model = manager(chunks=1)
    a, = stored(model, 1, (1,))
    b, = new(model, 2, (2,))
    assert model.prepare_store(2, [b]) == ([b], [a])
    model.complete_store(2, [b, a])                 # a is not being stored: ignored
    model.reset()
    assert model.take_events() == [(STORED, [a]), (REMOVED, [a]), (STORED, [b])]
    assert model.contents() == [] and model.take_events() == []


def test_a_store_threshold_stores_on_the_offer_that_reaches_it():
    model = manager(threshold=2, tracker=2)
    a, b, c = new(model, 1, (1, 2, 3))
    assert model.prepare_store(1, [a, b]) == ([], [])   # first offers: counted only
    assert model.prepare_store(1, [a, c]) == ([a], [])  # a's second offer; c pushes b out
    assert list(model.offers) == [a, c]
    assert model.prepare_store(1, [b]) == ([], [])      # b counts from 1 again
    assert model.stats() == {"pinned": 0, "writing": 1, "allocations": [1], "skipped": 4}


def test_stats_count_pins_and_writes_since_the_last_call():
    model = manager()
    a, b, c = new(model, 1, (1, 2, 3))
    model.prepare_store(1, [a, b])
    model.complete_store(1, [a])
    model.prepare_load(1, [a])
    model.prepare_load(1, [a])
    assert model.stats() == {"pinned": 1, "writing": 1, "allocations": [2]}
    model.complete_load(1, [a])
    assert model.contents() == [(a, 1), (b, -1)]
    assert model.stats() == {"pinned": 1, "writing": 1, "allocations": []}
