"""The unified oracle on worked examples, where its contract differs from `RadixCache`'s (SGLang
0.5.23's `unified_tree_core.py` and `components/full.py` are the contract): its clock (a match
stamps the path it ends at, the deeper the newer; an insert stamps each node it walks; a split's
upper node keeps the node's creation time), `insert` freeing the caller's duplicates, a
checkpoint taking its insert's node without a second match, the lock's positive delta. Plain
Python: nothing here needs SGLang."""

from kvfuzz.oracle.radix.model import RadixModel
from kvfuzz.oracle.radix.tree import RadixTree
from kvfuzz.oracle.unified.model import UnifiedModel
from kvfuzz.oracle.unified.tree import UnifiedTree


def nodes(tree) -> dict:
    return {node.path()[1]: node for node in tree.nodes()}


def test_a_match_stamps_the_path_it_ends_at_deeper_nodes_newer():
    tree = UnifiedTree(1, "lru")
    tree.insert(0, [1, 2], [10, 11])
    tree.insert(0, [1, 2, 3, 4], [10, 11, 12, 13])
    upper, lower = nodes(tree)[(1, 2)], nodes(tree)[(1, 2, 3, 4)]
    before = lower.access
    tree.match(0, [1, 2, 3, 4])
    assert lower.access > upper.access > before  # one read, 1e-5 less per level up
    assert abs(lower.access - upper.access - 1e-5) < 1e-9
    tree.match(0, [1, 2])  # ends above: the lower node keeps its time
    assert upper.access > lower.access


def test_radix_stamps_every_node_a_walk_passes_with_one_time():
    tree = RadixTree(1, "lru")
    tree.insert(0, [1, 2], [10, 11])
    tree.insert(0, [1, 2, 3, 4], [10, 11, 12, 13])
    tree.match(0, [1, 2, 3, 4])
    assert nodes(tree)[(1, 2)].access == nodes(tree)[(1, 2, 3, 4)].access


def test_an_insert_stamps_each_node_it_walks_with_a_time_of_its_own():
    tree = UnifiedTree(1, "lru")
    tree.insert(0, [1, 2], [10, 11])
    tree.insert(0, [1, 2, 3, 4], [10, 11, 12, 13])
    tree.insert(0, [1, 2, 3, 4, 5], [10, 11, 12, 13, 14])
    found = nodes(tree)
    assert found[(1, 2)].access < found[(1, 2, 3, 4)].access < found[(1, 2, 3, 4, 5)].access


def test_a_split_keeps_the_nodes_creation_time_and_stamps_the_lower_part_after():
    tree = UnifiedTree(2, "fifo")
    tree.insert(0, [1, 2, 3, 4], [10, 11, 12, 13])
    leaf = nodes(tree)[(1, 2, 3, 4)]
    created = leaf.created
    value, upper = tree.match(0, [1, 2, 9, 9])
    assert value == [10, 11] and upper.key == [1, 2] and leaf.key == [3, 4]
    assert upper.created == leaf.created == created  # FIFO sees the prefix as old as the rest
    assert upper.access > leaf.access  # the match's stamp comes after the split's
    radix = RadixTree(2, "fifo")
    radix.insert(0, [1, 2, 3, 4], [10, 11, 12, 13])
    _, radix_upper = radix.match(0, [1, 2, 9, 9])
    assert radix_upper.created > nodes(radix)[(1, 2, 3, 4)].created  # RadixCache: made anew


def test_insert_frees_the_callers_slots_of_what_the_tree_had():
    model = UnifiedModel(1, 8, "lru")
    model.take([1, 2])
    assert model.insert([5, 6], 0, 0, [1, 2]) == 0 and model.free == set(range(3, 9))
    model.take([3, 4, 5])
    assert model.insert([5, 6, 7], 0, 0, [3, 4, 5]) == 2
    assert model.free == set(range(6, 9)) | {3, 4}  # the duplicates of [5 6] went back
    radix = RadixModel(1, 8, "lru")
    radix.take([1, 2])
    radix.insert([5, 6], 0, 0, [1, 2])
    radix.take([3, 4, 5])
    radix.insert([5, 6, 7], 0, 0, [3, 4, 5])
    assert {3, 4}.isdisjoint(radix.free)  # RadixCache leaves them to the caller


def test_a_checkpoint_moves_the_lock_without_matching_again():
    def checkpointed(model):
        model.take([1, 2])
        model.insert([1, 2], 0, 0, [1, 2])
        model.admit_match(1, [1, 2, 3, 4], 4, 0, 0)
        model.admit_lock(1)
        model.grant(1, [3])
        assert model.checkpoint(1) == 3
        found = nodes(model.tree)
        assert model.requests[1].node is found[(1, 2, 3)] and found[(1, 2, 3)].lock == 1
        return found[(1, 2)], found[(1, 2, 3)]

    upper, leaf = checkpointed(UnifiedModel(1, 16, "lru"))
    assert upper.access < leaf.access  # the insert walked [1 2], then made [3]
    upper, leaf = checkpointed(RadixModel(1, 16, "lru"))
    assert upper.access == leaf.access  # RadixCache's second match stamped both at once


def test_the_pin_probe_reads_a_positive_delta_and_the_protected_size():
    model = UnifiedModel(1, 16, "lru")
    model.take([1, 2, 3])
    model.insert([1, 2, 3], 0, 0, [1, 2, 3])
    assert model.pin([1, 2], 0) == [2, 2]  # the match splits [1 2 3]: [1 2] is locked
    assert model.tree.protected_size() == 0 and model.tree.evictable_size() == 3
