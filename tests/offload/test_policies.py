"""The offload oracle's two policies on worked examples, through the manager model: LRU's ranks
(a request's tail goes first, the first key touched ends most recent, recency moves while a
chunk is pinned, a finished request's head ends most recent) and ARC's lists (T1 to T2 on reuse
only, evictions to the ghosts, the adaptive target, the fallback to T1, ghosts trimmed)."""

from tests.offload.test_oracle import manager, new, stored


# -- LRU ------------------------------------------------------------------------------------
def test_lru_a_request_s_tail_goes_first_and_a_touch_ends_with_its_first_key_most_recent():
    model = manager("lru", chunks=4)
    a, b, c = stored(model, 1, (1, 2, 3))
    assert model.policy.view() == {"order": [c, b, a], "evictable": [a, b, c]}
    model.touch(1, [c, b])
    assert model.policy.view()["order"] == [a, b, c]


def test_lru_recency_moves_while_a_chunk_is_pinned():
    model = manager("lru", chunks=3)
    a, b, c = stored(model, 1, (1, 2, 3))
    model.prepare_load(1, [c])
    model.touch(1, [c])                              # pinned, yet the most recent now
    assert model.policy.view() == {"order": [b, a, c], "evictable": [a, b]}
    model.complete_load(1, [c])
    d, = new(model, 2, (4,))
    assert model.prepare_store(2, [d]) == ([d], [b])


def test_lru_without_positions_keys_go_in_the_order_they_were_stored():
    model = manager("lru", chunks=3)
    a, b, c = stored(model, 1, (1, 2, 3), positioned=False)
    assert model.policy.view()["order"] == [a, b, c]


def test_lru_a_finished_request_leaves_its_head_most_recent():
    model = manager("lru", chunks=4)
    a, b = stored(model, 1, (1, 2))
    x, = stored(model, 2, (9,))
    assert model.policy.view()["order"] == [b, a, x]
    model.finish(1)                                  # b, then a, touched
    assert model.policy.view()["order"] == [x, b, a]
    model.finish(1)                                  # finished once
    assert model.policy.view()["order"] == [x, b, a]


def test_lru_a_later_request_s_offer_ranks_a_stored_chunk_with_it():
    model = manager("lru", chunks=4)
    a, b = stored(model, 1, (1, 2))
    x, = stored(model, 2, (9,))
    a2, = new(model, 3, (1,))                        # the same chunk, in a new request
    assert a2 == a and model.prepare_store(3, [a]) == ([], [])
    assert model.policy.view()["order"] == [b, x, a]


# -- ARC ------------------------------------------------------------------------------------
def test_arc_a_chunk_moves_to_t2_only_when_reused():
    model = manager("arc", chunks=4)
    a, b = stored(model, 1, (1, 2))
    model.finish(1)                                  # it only inserted them: still T1
    assert model.policy.view()["t1"] == [b, a] and model.policy.view()["t2"] == []
    new(model, 2, (1, 2))
    model.prepare_load(2, [a])
    model.complete_load(2, [a])
    model.finish(2)                                  # a reused: T2
    assert model.policy.view()["t1"] == [b] and model.policy.view()["t2"] == [a]


def test_arc_a_touch_of_a_chunk_being_stored_keeps_it_in_t1():
    model = manager("arc", chunks=4)
    a, b = new(model, 1, (1, 2))
    model.prepare_store(1, [a, b])
    model.complete_store(1, [a])
    model.touch(1, [a, b])                           # b first: still being stored
    assert model.policy.view()["t1"] == [b] and model.policy.view()["t2"] == [a]


def test_arc_evicts_to_the_ghosts_and_a_ghost_miss_moves_the_target():
    model = manager("arc", chunks=2)
    a, b = stored(model, 1, (1, 2))
    c, = new(model, 2, (3,))
    assert model.prepare_store(2, [c]) == ([c], [a])  # |T1| 2 >= target 0: from T1
    assert model.policy.view()["b1"] == [a]
    a3, = new(model, 3, (1,))
    model.complete_store(2, [c])
    assert model.prepare_store(3, [a3]) == ([a], [b])  # a's miss was a B1 ghost: target 1
    view = model.policy.view()
    assert view["target"] == 1 and view["b1"] == [b] and view["t1"] == [c, a]


def test_arc_falls_back_to_t1_when_t2_has_no_candidate():
    model = manager("arc", chunks=3)
    a, b, c = stored(model, 1, (1, 2, 3))
    model.policy.target = 3                          # T1 below target: T2 is asked first
    d, = new(model, 2, (4,))
    assert model.prepare_store(2, [d]) == ([d], [a])


def test_arc_ghost_lists_keep_the_last_capacity_keys():
    model = manager("arc", chunks=1)
    for rid in range(1, 5):
        key, = new(model, rid, (rid,))
        model.prepare_store(rid, [key])
        model.complete_store(rid, [key])
    assert model.policy.view()["b1"] == [(3, 0)] and model.policy.view()["t1"] == [(4, 0)]
