"""Misuse on purpose: with debug checks on, each caller bug is rejected and leaves the allocator as
it was (oracle.allocator defines this); an implementation that accepts it silently, or reports it
only after corrupting the free list, is caught."""

from collections import Counter
from dataclasses import replace

import pytest
import torch

from kvfuzz.fuzz.allocator.lockstep import AllocatorLockstep
from kvfuzz.impl.allocator.paged_allocator import PagedAllocator
from kvfuzz.strategies.allocator.profile import CHECKS_AFTER_RELEASE, NO_RELEASE_CHECKS
from kvfuzz.strategies.allocator.trace import (MISUSES, Admit, Extend, Finish, GroupBegin,
                                               GroupEnd, Misuse, Trace)
from tests.helpers import divergence, double


class Unchecked(PagedAllocator):
    """Debug checks off whatever the environment says: every misuse goes through silently."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs, debug=False)


class CheckedAfterRelease(PagedAllocator):
    """Upstream's order: release first, then the duplicate check raises."""

    def _release(self, page_ids, check=True):
        super()._release(page_ids, check=False)
        if check and self.debug_mode:
            all_free = self.get_all_free_pages().tolist()
            assert len(set(all_free)) == len(all_free), "duplicate pages"


class SegmentsFromAnywhere(PagedAllocator):
    """`free_segment` without its alignment check: from a start inside a page it frees the pages
    of every page-th slot from there, the next request's page among them."""

    def free_segment(self, free_index, *, start_pos):
        if free_index.numel():
            self.free_page_ids(free_index[::self.page_size] // self.page_size)


class CheckedAfterReleaseInGroups(CheckedAfterRelease):
    """Upstream's order at a group's end too: each part released, then checked."""

    def free_group_end(self):
        pending, self.free_group = self.free_group or [], None
        ids, self.free_page_ids_group = self.free_page_ids_group, []
        if pending:
            self._release(torch.unique(torch.cat(pending) // self.page_size))
        if ids:
            self._release(torch.cat(ids))


def misuse_trace(kind: str, salt: int, page_size: int = 4, debug: bool = True) -> Trace:
    ops = (Admit(1), Extend((1,), (3 * page_size - 1,)), Admit(2), Extend((2,), (5,)),
           Finish(1, "free"), Misuse(kind, salt), Extend((2,), (page_size,)))
    return Trace(page_size, 16 * page_size, salt % 2 == 1, ops, debug)


def labels(found) -> set[str]:
    return {label for label, _ in found.lines} - {"call", "before"}


def events(trace: Trace) -> Counter:
    lock = AllocatorLockstep(trace, PagedAllocator)
    for op in trace.ops:
        _, problems = lock.step(op)
        assert problems == [], problems
    return lock.events


@pytest.mark.parametrize("kind", MISUSES)
@pytest.mark.parametrize("salt", [0, 1, 2])
def test_misuse_is_rejected_cleanly_by_the_bundled_allocator(kind, salt):
    trace = misuse_trace(kind, salt)
    assert divergence("allocator", trace, "allocator.torch") is None
    assert events(trace)[f"misuse rejected: {kind}"] == 1  # the oracle did expect a rejection


@pytest.mark.parametrize("kind", MISUSES)
def test_silently_accepted_misuse_is_reported(kind):
    found = divergence("allocator", misuse_trace(kind, 0),
                       double("allocator", f"{__name__}:Unchecked"))
    assert found is not None and found.signature[3] == "rejection", found and found.report()
    assert "expected the call to be rejected" in found.report()


@pytest.mark.parametrize("kind", ["double_free", "free_unallocated"])
def test_double_free_reported_after_corrupting_the_free_list_is_a_divergence(kind):
    found = divergence("allocator", misuse_trace(kind, 0),
                       double("allocator", f"{__name__}:CheckedAfterRelease"))
    assert found is not None, "a report after corruption must not pass"
    seen = labels(found)
    assert "rejection" not in seen and seen & {"free list", "invariant", "available_size"}


def test_misuse_is_not_resolved_where_it_cannot_be_detected():
    # P == 1: every last_loc satisfies (last_loc + 1) % 1 == prefix % 1; debug off: no checks.
    assert "misuse rejected: bad_last_loc" not in events(misuse_trace("bad_last_loc", 0, 1))
    assert not any(k.startswith("misuse") for k in events(misuse_trace("free_page0", 0,
                                                                          debug=False)))


@pytest.mark.parametrize("debug", [True, False])
@pytest.mark.parametrize("salt", [0, 1, 5])
def test_an_unaligned_segment_is_rejected_in_every_mode(debug, salt):
    trace = misuse_trace("segment_unaligned", salt, debug=debug)
    assert divergence("allocator", trace, "allocator.torch") is None
    assert events(trace)["misuse rejected: segment_unaligned"] == 1


def test_an_unaligned_segment_accepted_is_reported():
    found = divergence("allocator", misuse_trace("segment_unaligned", 0, debug=False),
                       double("allocator", f"{__name__}:SegmentsFromAnywhere"))
    assert found is not None and found.signature[3] == "rejection", found and found.report()
    assert "segment_unaligned" in found.report()


def _declared_after(name: str):
    """A test double declaring upstream PagedTokenToKVPoolAllocator's debug order."""
    return replace(double("allocator", f"{__name__}:{name}"),
                   preconditions=(NO_RELEASE_CHECKS, CHECKS_AFTER_RELEASE))


@pytest.mark.parametrize("kind", ["double_free", "free_unallocated"])
@pytest.mark.parametrize("salt", [0, 1, 2])
def test_a_class_declaring_checks_after_release_releases_then_raises(kind, salt):
    trace = misuse_trace(kind, salt)
    assert divergence("allocator", trace, _declared_after("CheckedAfterRelease")) is None
    lock = AllocatorLockstep(trace, CheckedAfterRelease, checks_after_release=True)
    steps = [lock.step(op) for op in trace.ops]
    assert all(problems == [] for _, problems in steps)
    assert lock.events[f"misuse rejected: {kind}"] == 1 and lock.model.corrupted
    assert steps[-1][0] is None  # nothing is judged on the corrupted free list


@pytest.mark.parametrize("name, labels_seen", [
    ("Unchecked", {"rejection"}),                        # the double free goes through silently
    ("PagedAllocator", {"free list", "available_size"}),  # rejected before the release
])
def test_checks_after_release_catches_a_class_that_checks_otherwise(name, labels_seen):
    found = divergence("allocator", misuse_trace("double_free", 0), _declared_after(name))
    assert found is not None and labels(found) & labels_seen, found and found.report()


@pytest.mark.parametrize("salt", [0, 1, 2])  # free, free_page_ids, free_segment inside the group
def test_a_double_free_inside_a_group_is_released_and_reported_at_its_end(salt):
    ops = (Admit(1), Extend((1,), (11,)), Admit(2), Extend((2,), (5,)), Finish(1, "free"),
           GroupBegin(), Finish(2, "page_ids"), Misuse("double_free", salt), GroupEnd())
    trace = Trace(4, 64, False, ops, True)
    assert divergence("allocator", trace, _declared_after("CheckedAfterReleaseInGroups")) is None
    lock = AllocatorLockstep(trace, CheckedAfterReleaseInGroups, checks_after_release=True)
    for op in trace.ops:
        assert lock.step(op)[1] == []
    assert lock.events["misuse accepted: double_free"] == 1  # staged in the group ...
    assert lock.events["misuse rejected: group_end"] == 1 and lock.model.corrupted  # ... seen
    # Checked before the release at the group's end: told apart by the free list.
    found = divergence("allocator", trace, _declared_after("CheckedAfterRelease"))
    assert found is not None and labels(found) & {"free list", "available_size"}, found
