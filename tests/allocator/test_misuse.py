"""Misuse on purpose: with debug checks on, each caller bug is rejected and leaves the allocator as
it was (oracle.allocator defines this); an implementation that accepts it silently, or reports it
only after corrupting the free list, is caught."""

from collections import Counter

import pytest

from kvfuzz.fuzz.allocator.lockstep import AllocatorLockstep
from kvfuzz.impl.allocator.paged_allocator import PagedAllocator
from kvfuzz.strategies.allocator.trace import MISUSES, Admit, Extend, Finish, Misuse, Trace
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
