"""The radix oracle on worked examples (SGLang 0.5.23's `RadixCache` source is the contract): page-
aligned keys, splits, hit counts, locks and sizes, every eviction policy, the scheduler's
checkpoint and release, a reset's void locks; each invariant and the event ledger shown firing on
a broken state. Plain Python: nothing here needs SGLang."""

from collections import Counter

import pytest

from kvfuzz.oracle.radix.events import EventLedger
from kvfuzz.oracle.radix.invariants import (NodeView, eviction_violations, pair_violations,
                                            pool_violations, size_problems, tree_violations)
from kvfuzz.oracle.radix.model import RadixModel
from kvfuzz.oracle.radix.pages import PageNames
from kvfuzz.oracle.radix.tree import POLICIES, RadixTree


def paths(tree: RadixTree) -> list:
    return sorted(node.path()[1] for node in tree.nodes())


def test_keys_are_cut_to_whole_pages_and_a_key_under_a_page_changes_nothing():
    tree = RadixTree(4, "lru")
    assert tree.insert(0, list(range(1, 11)), list(range(100, 110))) == (0, tree.nodes()[0])
    assert paths(tree) == [tuple(range(1, 9))] and tree.nodes()[0].value == list(range(100, 108))
    clock = tree.clock
    assert tree.match(0, [1, 2, 3]) == ([], tree.root) and tree.clock == clock  # no access
    assert tree.match(0, list(range(1, 8)))[0] == list(range(100, 104))  # one page of 7 tokens


def test_a_match_ending_inside_a_node_splits_it_and_the_upper_part_inherits_its_counts():
    tree = RadixTree(2, "lru")
    tree.insert(0, [1, 2, 3, 4, 5, 6], [10, 11, 12, 13, 14, 15], priority=3)
    leaf = tree.nodes()[0]
    tree.lock(leaf)
    value, upper = tree.match(0, [1, 2, 3, 4, 9, 9])
    assert value == [10, 11, 12, 13] and upper.key == [1, 2, 3, 4] and leaf.key == [5, 6]
    assert (upper.hits, upper.priority, upper.lock) == (leaf.hits, leaf.priority, leaf.lock) \
        == (1, 3, 1)
    assert upper.created > leaf.access and upper.access == upper.created  # made after the walk
    assert tree.root.children == {(0, (1, 2)): upper} and upper.children == {(0, (5, 6)): leaf}


def test_peek_tells_what_a_match_finds_without_touching_anything():
    tree = RadixTree(2, "lru")
    tree.insert(0, [1, 2, 3, 4], [10, 11, 12, 13])
    clock, before = tree.clock, paths(tree)
    assert tree.peek(0, [1, 2, 3, 4, 5]) == (4, False)
    assert tree.peek(0, [1, 2, 9, 9]) == (2, True) and tree.peek(1, [1, 2]) == (0, False)
    assert (tree.clock, paths(tree)) == (clock, before)


def test_insert_counts_a_hit_only_past_what_the_request_inserted_before():
    tree = RadixTree(1, "lfu")
    tree.insert(0, [1, 2], [10, 11])
    assert tree.insert(0, [1, 2, 3], [20, 21, 22], inserted_len=2)[0] == 2
    upper, leaf = sorted(tree.nodes(), key=lambda n: len(n.path()[1]))
    assert (upper.hits, leaf.hits) == (1, 1)  # [1 2] was the request's own: no second hit
    tree.insert(0, [1, 2, 3], [30, 31, 32])
    assert (upper.hits, leaf.hits) == (2, 2) and leaf.value == [22]  # a hit keeps the slots


def test_lock_and_unlock_move_whole_nodes_between_the_sizes():
    tree = RadixTree(1, "lru")
    tree.insert(0, [1, 2, 3], [1, 2, 3])
    _, node = tree.insert(0, [1, 2, 4, 5], [1, 2, 6, 7])
    assert (tree.evictable_size(), tree.protected_size()) == (5, 0)
    assert tree.lock(node) == -4 and tree.lock(node) == 0  # [1 2] and [4 5] stop being evictable
    assert (tree.evictable_size(), tree.protected_size()) == (1, 4)
    assert tree.unlock(node) == 0 and tree.unlock(node) == 4
    assert all(n.lock == 0 for n in tree.nodes()) and tree.root.lock == 1


def three_leaves(policy: str) -> tuple[RadixTree, dict]:
    """Leaves [1], [2], [3] inserted in that order, then [2] hit twice, then [3] matched."""
    tree = RadixTree(1, policy)
    leaves = {t: tree.insert(0, [t], [t], priority=4 - t)[1] for t in (1, 2, 3)}
    tree.insert(0, [2], [9])
    tree.insert(0, [2], [9])
    tree.match(0, [3])
    return tree, leaves


@pytest.mark.parametrize("policy, first", [
    ("lru", 1), ("lfu", 1), ("fifo", 1), ("mru", 3), ("filo", 3), ("priority", 3),
    ("slru", 1)])
def test_each_policy_evicts_its_first_leaf(policy, first):
    tree, leaves = three_leaves(policy)
    gone = tree.evict(1)
    assert gone == [leaves[first]] and first not in {n.key[0] for n in tree.nodes()}


def test_the_policies_are_the_seven_radix_cache_accepts():
    assert sorted(POLICIES) == ["fifo", "filo", "lfu", "lru", "mru", "priority", "slru"]


def test_eviction_takes_whole_leaves_until_the_shortfall_and_a_childless_parent_joins():
    tree = RadixTree(1, "lru")
    tree.insert(0, [1, 2, 3], [1, 2, 3])
    tree.insert(0, [1, 2, 4, 5], [1, 2, 4, 5])  # [1 2] with children [3], [4 5]
    tree.insert(0, [7], [7])
    gone = tree.evict(2)  # oldest first: [3] (walked by the second insert), then [4 5]
    assert [n.key for n in gone] == [[3], [4, 5]]  # each whole: 2 asked, 3 freed
    gone = tree.evict(3)  # [1 2], childless now, is older than [7]
    assert [n.key for n in gone] == [[1, 2], [7]] and tree.nodes() == []
    assert tree.evict(1) == []


def test_a_locked_node_is_never_evicted():
    tree = RadixTree(1, "lru")
    _, locked = tree.insert(0, [1, 2], [1, 2])
    tree.insert(0, [3], [3])
    tree.lock(locked)
    assert [n.key for n in tree.evict(10)] == [[3]] and tree.nodes() == [locked]


def admitted(model: RadixModel, rid: int, tokens, prompt: int) -> list:
    hit = model.admit_match(rid, tokens, prompt, 0, 0)
    model.admit_lock(rid)
    return hit


def test_admission_never_matches_the_prompts_last_token():
    model = RadixModel(1, 16, "lru")
    model.tree.insert(0, [1, 2, 3], [5, 6, 7])
    assert admitted(model, 1, [1, 2, 3], 3) == [2, [5, 6]]
    request = model.requests[1]
    assert (request.row, request.protected, request.node.key) == ([5, 6], 2, [1, 2])
    assert model.tree.protected_size() == 2


def test_checkpoint_frees_duplicates_rewrites_the_row_and_moves_the_lock():
    model = RadixModel(2, 16, "lru")
    admitted(model, 1, [1, 2, 3, 4, 5], 5)
    model.grant(1, [2, 3, 4, 5, 6])  # pages 1, 2 and half of 3
    admitted(model, 2, [1, 2, 3, 4], 4)
    model.grant(2, [8, 9, 10, 11])  # pages 4, 5
    assert model.checkpoint(1) == 4 and model.requests[1].row == [2, 3, 4, 5, 6]
    assert model.free == {6, 7, 8} and model.held() == {3, 4, 5}
    assert model.checkpoint(2) == 4  # the tree had [1 2 3 4]: r2's own slots are duplicates
    assert model.requests[2].row == [2, 3, 4, 5] and model.free == {4, 5, 6, 7, 8}
    assert model.requests[2].node.lock == 2 and model.tree.protected_size() == 4
    model.release(1)
    model.release(2)
    assert model.free == {3, 4, 5, 6, 7, 8} and model.tree.evictable_size() == 4


def test_checkpoint_inserts_the_prompt_again_with_priority_plus_one():
    model = RadixModel(1, 16, "priority")
    model.admit_match(1, [1, 2, 3, 4], 2, 0, 5)
    model.admit_lock(1)
    model.grant(1, [1, 2, 3, 4])
    model.checkpoint(1)
    prompt, output = sorted(model.tree.nodes(), key=lambda n: len(n.path()[1]))
    assert (prompt.key, prompt.priority, output.key, output.priority) == ([1, 2], 6, [3, 4], 5)
    model.release(1)
    assert [n.key for n in model.tree.evict(1)] == [[3, 4]]  # the output goes first


def test_a_reset_voids_the_locks_of_requests_in_flight():
    model = RadixModel(1, 8, "lru")
    admitted(model, 1, [1, 2], 2)
    model.grant(1, [1, 2])
    model.checkpoint(1)
    model.reset()
    assert model.tree.nodes() == [] and model.free == set(range(1, 9)) and model.held() == set()
    model.release_stale(1)
    assert model.requests == {} and model.tree.protected_size() == 0


def test_pin_reads_the_lock_counts_and_gives_them_back():
    model = RadixModel(1, 8, "lru")
    model.tree.insert(0, [1, 2], [1, 2])
    model.tree.insert(0, [1, 2, 3], [1, 2, 3])
    admitted(model, 1, [1, 2, 3], 3)  # locks [1 2]
    assert model.pin([1, 2, 3], 0) == [1, 2]  # deepest first
    assert [n.lock for n in sorted(model.tree.nodes(), key=lambda n: n.key)] == [1, 0]


def view(path, key, value, lock=0, parent=None, edge=None, page=1):
    return NodeView((0, tuple(path)), parent, edge or (0, tuple(key[:page])), tuple(key),
                    list(value), lock, 0, 0, 0.0, 0.0)


def test_each_tree_invariant_fires_on_a_broken_state():
    good = [view([1, 2], [1, 2], [4, 5], lock=1), view([1, 2, 3], [3], [6], lock=1,
                                                     parent=(0, (1, 2)))]
    assert tree_violations(good, 1) == []
    stale_edge = [view([1, 2], [1, 2], [4, 5], edge=(0, (9,)))]
    assert "filed under edge (0, (9,)), not its first page" in tree_violations(stale_edge, 1)[0]
    upside_down = [good[0], view([1, 2, 3], [3], [6], lock=2, parent=(0, (1, 2)))]
    assert "lock counts not monotone" in tree_violations(upside_down, 1)[0]
    twice = [good[0], view([1, 2, 3], [3], [5], lock=1, parent=(0, (1, 2)))]
    assert tree_violations(twice, 1) == ["1 slots twice in the tree, e.g. [5]"]
    torn = [view([1, 2], [1, 2], [5, 7], page=2)]
    assert "are not one whole page" in tree_violations(torn, 2)[0]


def test_sizes_are_checked_against_their_nodes_with_the_sign():
    nodes = [view([1, 2], [1, 2], [4, 5]), view([3], [3], [6], lock=1)]
    assert size_problems("evictable_size", 2, nodes, False) == []
    assert "1 tokens counted twice" in size_problems("evictable_size", 3, nodes, False)[0]
    assert "1 tokens missing from the count" in size_problems("protected_size", 0, nodes,
                                                              True)[0]


def no_other_invariant(after, free, evictable, protected) -> bool:
    """Every other invariant holds on `after` (page size 1, 5 slots, nothing held)."""
    return tree_violations(after, 1) == [] and \
        size_problems("evictable_size", evictable, after, False) == [] and \
        size_problems("protected_size", protected, after, True) == [] and \
        pool_violations(after, free, set(), 1, 5, len(free), evictable, protected) == []


def test_eviction_taking_a_locked_node_or_one_above_a_node_that_stays_is_reported_alone():
    # The state after each fault is one whose sizes, pool and tree are in order: only the
    # nodes before and after the op show that eviction took what it may not.
    upper, leaf = view([1, 2], [1, 2], [4, 5]), view([1, 2, 3], [3], [3], parent=(0, (1, 2)))
    assert eviction_violations([upper, leaf], [upper]) == []       # a leaf
    assert eviction_violations([upper, leaf], []) == []            # a leaf, then its parent
    assert no_other_invariant([leaf], [1, 2, 4, 5], 1, 0)
    assert eviction_violations([upper, leaf], [leaf]) == [
        "node [1 2] left the tree while node [1 2 3] below it stays: eviction takes only leaves"]
    locked = view([1, 2], [1, 2], [4, 5], lock=1)
    assert no_other_invariant([], [1, 2, 3, 4, 5], 0, 0)
    assert eviction_violations([locked], []) == [
        "node [1 2] left the tree while locked (lock 1): eviction takes only unlocked leaves"]


def test_a_lock_unlock_pair_leaves_every_pages_count_where_it_was():
    whole = [view([1, 2, 3], [1, 2, 3], [4, 5, 6], lock=1)]
    split = [view([1], [1], [4], lock=1),  # a match split it: both halves keep the count
             view([1, 2, 3], [2, 3], [5, 6], lock=1, parent=(0, (1,)))]
    assert pair_violations(whole, split, 1) == []
    # an unlock that released nothing: the counts still monotone, one more on every page
    kept = [view([1], [1], [4], lock=2), view([1, 2, 3], [2, 3], [5, 6], lock=2,
                                            parent=(0, (1,)))]
    assert tree_violations(kept, 1) == [] and pair_violations(whole, kept, 1) == [
        "lock counts not back to baseline after a lock/unlock pair: the page ending [1] had "
        "lock 1 before, 2 after (3 pages moved)"]


def test_the_pool_accounts_for_every_page_once():
    nodes = [view([1, 2], [1, 2], [4, 5])]
    assert pool_violations(nodes, [1, 2, 3], {6}, 1, 6, 3, 2, 0) == []
    assert "both in the tree and on the free list" in \
        pool_violations(nodes, [1, 2, 4], {6}, 1, 6, 3, 2, 0)[0]
    assert "1 tokens lost" in pool_violations(nodes, [1, 2], {6}, 1, 6, 2, 2, 0)[0]
    assert "pages twice on the free list" in pool_violations(nodes, [1, 1, 2], {6}, 1, 6, 3,
                                                             2, 0)[0]


def test_pages_are_named_by_their_tokens_from_the_root_of_their_namespace():
    names = PageNames()
    first, second = names.of_path(0, (1, 2, 3, 4, 5), 2)
    assert names.tokens(second) == (1, 2, 3, 4) and names.tail(second) == "1 2 3 4"
    assert names.of_path(0, (1, 2, 3, 4), 2) == [first, second] != names.of_path(1, (1, 2), 2)
    nodes = [view([1, 2], [1, 2], [4, 5], page=2),
             view([1, 2, 3, 4], [3, 4], [6, 7], parent=(0, (1, 2)), page=2)]
    assert names.count(nodes, 2) == Counter({first: 1, second: 1})
    other = NodeView((1, (1, 2)), None, (1, (1, 2)), (1, 2), [8, 9], 0, 0, 0, 0.0, 0.0)
    assert names.count(nodes + [other], 2, namespaces=False)[first] == 2


@pytest.mark.parametrize("kept", [PageNames.RUNS_KEPT, 3])
def test_counting_pages_again_names_them_as_the_first_count_did(kept):
    """The judge counts both trees after every op, each node's names kept from the op before:
    a node met again (or after the kept names were dropped, `kept` tokens) counts the pages its
    tokens name, whichever node it hangs under."""
    names = PageNames()
    names.RUNS_KEPT = kept
    root = view([1, 2], [1, 2], [4, 5], page=2)
    child = view([1, 2, 3, 4], [3, 4], [6, 7], parent=(0, (1, 2)), page=2)
    moved = view([3, 4], [3, 4], [6, 7], page=2)  # the same key under the root
    for _ in range(3):
        by_tokens = Counter(names.tokens(p) for p in names.count([root, child, moved], 2)
                            .elements())
        assert by_tokens == Counter({(1, 2): 1, (1, 2, 3, 4): 1, (3, 4): 1})


def test_the_event_ledger_holds_what_was_stored_minus_removed():
    names = PageNames()
    ledger = EventLedger(names)
    assert ledger.fold([("cleared",), ("stored", [11, 12], None, [1, 2, 3, 4], 2),
                        ("stored", [13], 12, [5, 6], 2), ("removed", [13])]) == []
    pages = Counter(names.of_path(0, (1, 2, 3, 4), 2))
    assert ledger.compare(pages) == []
    assert "never stored" in ledger.fold([("stored", [20], 99, [7, 8], 2)])[0]
    assert "not stored" in ledger.fold([("removed", [13])])[0]
    one = Counter(names.of_path(0, (1, 2), 2))
    assert "announced pages not cached, e.g. the page ending [1 2 3 4]" in \
        ledger.compare(one)[0].replace(" (stored minus removed exceeds what is present)", "")
    ledger.fold([("cleared",)])
    assert "never announced" in ledger.compare(one)[0]
