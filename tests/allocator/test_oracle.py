"""Hand-written allocator scenarios pinning exact slots and free-list order (spec §4), run on the
oracle and on `PagedAllocator` alike; and the invariant checks shown to catch broken states."""

import pytest

from kvfuzz.impl.allocator.driver import AllocatorDriver
from kvfuzz.impl.allocator.paged_allocator import PagedAllocator
from kvfuzz.oracle.allocator.model import AllocatorModel, release_problems
from kvfuzz.oracle.allocator.invariants import new_slot_violations, state_violations


class ModelSide:
    def __init__(self, size, page_size, need_sort):
        self.model = AllocatorModel(size, page_size, need_sort)

    def __getattr__(self, name):
        return getattr(self.model, name)

    def free_list(self):
        return self.model.free

    def staged(self):
        return self.model.staged


def torch_side(size, page_size, need_sort):
    return AllocatorDriver(PagedAllocator, size, page_size, need_sort, debug=False)


sides = pytest.mark.parametrize("make", [ModelSide, torch_side], ids=["oracle", "torch"])


@sides
def test_fresh_pool_hands_out_page_1_first_and_never_page_0(make):
    side = make(64, 4, False)
    assert side.available_size() == 64
    assert side.alloc(8) == [4, 5, 6, 7, 8, 9, 10, 11]
    assert side.free_list()[0] == 3 and 0 not in side.free_list()


@sides
def test_spec_worked_example_batch_extend_after_alloc(make):
    side = make(64, 4, False)
    side.alloc(8)  # pages 1, 2
    assert side.alloc_extend([1, 3], [6, 7], [4, 10]) == [5, 6, 7, 12, 13, 11, 16, 17, 18]
    assert side.free_list()[:2] == [5, 6]


@sides
def test_freed_pages_are_prepended_ascending_and_reused_first(make):
    side = make(40, 4, False)
    slots = side.alloc(12)                      # pages 1, 2, 3
    side.free_slots([slots[9], slots[0], slots[1]])  # touches pages 3 and 1: each released whole
    assert side.free_list()[:3] == [1, 3, 4]
    assert side.alloc(4) == [4, 5, 6, 7]


@sides
def test_need_sort_stages_frees_and_merges_sorted_only_when_short(make):
    side = make(24, 4, True)                    # pages 1..6
    side.alloc(16)                              # pages 1..4; head [5, 6]
    side.free_page_ids([3, 1])
    assert side.available_size() == 16 and sorted(side.staged()) == [1, 3]
    assert side.alloc(8) == [20, 21, 22, 23, 24, 25, 26, 27]  # head deep enough: no merge
    assert side.alloc(4) == [4, 5, 6, 7] and side.free_list() == [3] and side.staged() == []


@sides
def test_failed_allocation_returns_none_and_only_merges(make):
    side = make(16, 4, True)                    # pages 1..4
    side.alloc(12)
    side.free_page_ids([2])
    assert side.alloc_extend([0], [9], [-1]) is None   # needs 3 pages, 2 exist
    assert side.free_list() == [2, 4] and side.staged() == [] and side.available_size() == 8
    assert side.alloc_decode([5, 9], [3, 7]) == [8, 16]  # both open a page, in batch order


@sides
def test_group_end_releases_free_pages_then_page_ids_at_the_head(make):
    side = make(40, 4, False)
    side.alloc(24)                              # pages 1..6
    side.group_begin()
    side.free_slots([4, 5])                     # page 1
    side.free_page_ids([5, 3])
    side.free_slots([5, 24])                    # pages 1 (again: deduplicated) and 6
    assert side.free_list()[0] == 7             # nothing released inside the group
    side.group_end()
    assert side.free_list()[:5] == [5, 3, 1, 6, 7]


def test_page_size_one_decode_opens_a_page_for_every_token():
    # Spec §3: upstream's decode count says 0 pages here; the oracle (and PagedAllocator) do not.
    for make in (ModelSide, torch_side):
        side = make(4, 1, False)
        side.alloc(2)
        assert side.alloc_decode([2, 2], [1, 2]) == [3, 4]
        assert side.alloc_decode([3], [3]) is None


def test_state_violations_report_every_broken_partition():
    found = state_violations(6, [1, 1, 0], [2], [9], {2: {7}, 0: {3}})
    text = "\n".join(found)
    for needle in ("page 0 (the padding page) is on the free list", "pages twice on the free list",
                   "outside 1..6 on the pending group", "on the staged but held by live requests",
                   "page 0 (the padding page) held by r3", "lost), e.g. [3, 4, 5, 6]"):
        assert needle in text, text
    assert state_violations(3, [3, 1], [], [], {2: {1, 2}}) == []


def test_new_slot_violations_catch_misaligned_foreign_and_padding_slots():
    holders = {5: {1}}
    assert new_slot_violations(2, 0, [24, 25, 26], [], 4, holders) == []
    text = "\n".join(new_slot_violations(2, 0, [2, 21, 31], [], 4, holders)
                     + new_slot_violations(2, 1, [13], [24], 4, holders)
                     + new_slot_violations(3, 0, [20], [], 4, holders))
    for needle in ("in page 0 (the padding page)", "not page-aligned",
                   "its page for positions 0..3 is 6", "page 5 is already held by r1"):
        assert needle in text, text


def test_release_problems_name_double_frees_and_pages_outside_the_pool():
    problems = release_problems([0, 9, 2, 2, 3], free=[3], staged=[], num_pages=8)
    assert problems == ["page 0 is the reserved padding page", "page 9 is outside the pool 1..8",
                        "double free: page 2 released twice in one call",
                        "double free: page 3 is already free"]
