"""The host tier's checks (`oracle.unified.host`) on hand-made reads of a tree, each beside the
broken read it must refuse. Plain Python: nothing here needs SGLang."""

from kvfuzz.oracle.unified import host


def node(tokens, device=None, host_slots=None, children=0, parent_device=True, host_lock=0):
    return {"path": [None, list(tokens)], "device": device, "host": host_slots, "lock": 0,
            "host_lock": host_lock, "children": children, "parent_device": parent_device}


def state(nodes, host_free, host_size=4, device_free=6, device_size=8):
    cached = sum(len(n["device"]) for n in nodes if n["device"] is not None)
    return {"nodes": nodes, "host_free": host_free, "host_size": host_size,
            "device_free": device_free, "device_size": device_size, "evictable": cached,
            "protected": 0, "load_back_threshold": 2}


# [1 2] on the device only, [1 2 3 4] a duplicate (both tiers), [1 2 5 6] on the host only
TREE = [node([1, 2], [0, 1], children=2), node([1, 2, 3, 4], [2, 3], [0, 1]),
        node([1, 2, 5, 6], None, [2, 3])]


def test_a_consistent_tree_passes_every_check():
    good = state(TREE, [], device_free=4)
    assert host.accounting_problems(good) == [] and host.tier_problems(good) == []
    assert host.match_problems(good, None, [1, 2, 5, 6], 1, [2, 2, True, 4]) == []
    assert host.match_problems(good, None, [1, 2, 5, 6], 1, [2, 2, False, 2]) == []


def test_a_leaked_or_doubled_host_slot_is_refused():
    leaked = state(TREE, [3], device_free=4)  # slot 3 both cached and free
    assert host.accounting_problems(leaked)[0][0] == host.LEAKED
    lost = state(TREE[:2], [], device_free=4)  # [1 2 5 6]'s host slots 2, 3 gone
    assert host.accounting_problems(lost)[0][0] == host.LEAKED


def test_a_node_with_neither_tier_or_under_an_evicted_parent_is_refused():
    tombstone = state([node([1, 2], None, None, children=1), node([1, 2, 3], [0], [0, 1, 2])],
                      [3], device_free=7)
    labels = [label for label, _ in host.tier_problems(tombstone)]
    assert labels == [host.TOMBSTONE] * 1 and "neither tier" in host.tier_problems(tombstone)[0][1]
    orphan = state([node([1, 2], None, [0, 1], children=1), node([1, 2, 3], [0], None,
                                                                 parent_device=False)], [2, 3])
    assert "parent that is not" in host.tier_problems(orphan)[0][1]


def test_a_match_hit_is_judged_by_tier():
    good = state(TREE, [], device_free=4)
    assert host.match_problems(good, None, [1, 2, 5, 6], 1, [4, 0, False, 4])[0][0] == host.MATCH
    assert host.match_problems(good, None, [1, 2, 5, 6], 1, [2, 2, True, 2])[0][0] == host.MATCH


def test_a_host_hit_under_the_threshold_is_not_loaded():
    short = state([TREE[0], node([1, 2, 5], None, [2])], [0, 1, 3], device_free=6)
    assert host.match_problems(short, None, [1, 2, 5], 1, [2, 1, False, 2]) == []
    assert host.match_problems(short, None, [1, 2, 5], 1, [2, 1, True, 3])[0][0] == host.MATCH


def test_the_rust_core_is_held_to_the_python_core():
    pools = {"host_free": [1, 2], "device_free": [4, 5], "evictable": 2, "protected": 0}
    same = {"answers": [["host_evict", 2, 2]], "rust": pools, "python": dict(pools)}
    assert host.twin_problems(same) == []
    assert host.twin_problems({**same, "answers": [["host_evict", 2, 4]]})[0][0] == host.CORES
    reordered = {**same, "python": {**pools, "host_free": [2, 1]}}
    assert "host_free" in host.twin_problems(reordered)[0][1]


def test_a_sole_copy_evicted_before_a_duplicate_is_refused():
    before = state(TREE, [], device_free=4)
    # right: the duplicate's host copy reclaimed
    reclaimed = state([TREE[0], node([1, 2, 3, 4], [2, 3], None), TREE[2]], [0, 1],
                      device_free=4)
    assert host.pressure_problems(before, reclaimed, 2, 2) == []
    # wrong: the sole host copy evicted, the duplicate kept
    wrong = state(TREE[:2], [2, 3], device_free=4)
    assert host.pressure_problems(before, wrong, 2, 2)[0][0] == host.RECLAIM_ORDER
    # short of what was asked while a duplicate still holds host slots
    assert host.pressure_problems(before, before, 2, 0)[0][0] == host.RECLAIM_ORDER
    # the answer against what left the host pool
    assert host.pressure_problems(before, reclaimed, 2, 4)[0][0] == host.LEAKED


def test_an_inner_duplicate_goes_before_a_device_leafs():
    # [1 2] an inner duplicate (its child [1 2 3 4] on the device), [1 2 3 4] a leaf duplicate
    tree = [node([1, 2], [0, 1], [0, 1], children=1), node([1, 2, 3, 4], [2, 3], [2, 3])]
    before = state(tree, [], device_free=4)
    inner_first = state([node([1, 2], [0, 1], None, children=1), tree[1]], [0, 1],
                        device_free=4)
    assert host.pressure_problems(before, inner_first, 2, 2) == []
    leaf_first = state([tree[0], node([1, 2, 3, 4], [2, 3], None)], [2, 3], device_free=4)
    assert host.pressure_problems(before, leaf_first, 2, 2)[0][0] == host.RECLAIM_ORDER


def test_a_host_lock_keeps_its_copy():
    assert host.host_lock_problems([4, True, True, 2]) == []
    assert host.host_lock_problems([4, True, False, 2])[0][0] == host.HOST_LOCK


def test_a_prefetch_starts_where_the_match_ends_and_leaves_its_key_matchable():
    before = state(TREE, [], device_free=4)  # the key matches [1 2 5 6] through the host
    key = [1, 2, 5, 6, 7, 8]
    fetched = state(TREE + [node([1, 2, 5, 6, 7, 8], None, [3])], [], device_free=4)
    # (accounting aside: only the prefetch's own check is asked here)
    assert host.prefetch_problems(before, fetched, None, key, [4, 2, 2], 1) == []
    assert host.prefetch_problems(before, fetched, None, key, [2, 4, 4], 1)[0][0] == host.MATCH
    assert host.prefetch_problems(before, before, None, key, [4, 2, 2], 1)[0][0] == host.MATCH
