"""Caller bugs on purpose: each is rejected with nothing changed where SGLang's checks see it
(the debug checks above page size 1 and the strict invariant checks: a window released twice;
the strict ones: full slots released with their SWA peer; every mode: alloc above page size 1,
a segment from inside a page, a tail allocation of two requests or with a tail outside its
extend, a paged call at page size 1), and never made where they do not; a class that takes
one silently is caught."""

import pytest

from kvfuzz.fuzz.swa.lockstep import SWALockstep
from kvfuzz.impl.swa.swa_allocator import SWAAllocator
from kvfuzz.strategies.swa.scheduler_ops import EVERY_MODE, MISUSES, Misuse
from kvfuzz.strategies.swa.trace import Admit, Evict, Extend, Trace
from tests.helpers import divergence, double


class ReleasesAWindowTwice(SWAAllocator):
    """No check that a segment's pages still have their SWA peer."""

    def __init__(self, *args):
        super().__init__(*args)
        self.check_peers = False


class ReleasesFullSlotsWithTheirPeer(SWAAllocator):
    def __init__(self, *args):
        super().__init__(*args)
        self.check_released = False


class AllocsAtAnyPageSize(SWAAllocator):
    def alloc(self, need_size: int):
        pages = -(-need_size // self.page_size)
        full = self.full_attn_allocator.alloc(pages * self.page_size)
        return full if full is None else full[:need_size]


class PagedCallsAtAnyPageSize(SWAAllocator):
    """Serves a paged call at page size 1 as `alloc` of its new tokens."""

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens):
        if self.page_size == 1:
            return self.alloc(extend_num_tokens)
        return super().alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu,
                                    last_loc, extend_num_tokens)


class TailsOfAnyBatch(SWAAllocator):
    def alloc_extend_swa_tail(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu,
                              last_loc, extend_num_tokens, swa_tail_len):
        return self.alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                                 extend_num_tokens)


def misuse_trace(kind: str, salt: int = 0, P: int | None = None, debug: bool = True,
                 strict: bool = True) -> Trace:
    """Two running requests, the first with its window moved past two pages, then `kind`; at
    page size 4 (1 for a paged call at page size 1)."""
    P = P or (1 if kind == "paged_at_token" else 4)
    ops = (Admit(1), Extend((1,), (3 * P + 1,)), Evict(1, 1), Admit(2), Extend((2,), (P + 2,)),
           Misuse(kind, salt), Extend((1, 2), (1, 1)))
    return Trace(P, 16 * P, 16 * P, False, ops, debug, strict)


def events(trace: Trace):
    lock = SWALockstep(trace, SWAAllocator)
    for op in trace.ops:
        assert lock.step(op)[1] == [], op
    return lock.events


@pytest.mark.parametrize("kind", MISUSES)
@pytest.mark.parametrize("salt", [0, 1, 2, 5])
def test_each_misuse_is_rejected_with_nothing_changed(kind, salt):
    trace = misuse_trace(kind, salt)
    assert divergence("swa", trace, "swa.torch") is None
    assert events(trace)[f"misuse rejected: {kind}"] == 1


@pytest.mark.parametrize("kind", MISUSES)
def test_a_misuse_is_made_only_where_the_checks_see_it(kind):
    plain = events(misuse_trace(kind, debug=False, strict=False))
    assert plain[f"misuse rejected: {kind}"] == (kind in EVERY_MODE)
    debug_only = events(misuse_trace(kind, debug=True, strict=False))
    assert debug_only[f"misuse rejected: {kind}"] == (kind != "full_while_mapped")
    # at page size 1 the debug checks compare no pages: only the strict ones see a window twice;
    # a paged call is a misuse there only
    token = events(misuse_trace(kind, P=1, debug=True, strict=False))
    assert token[f"misuse rejected: {kind}"] == (kind == "paged_at_token")
    paged = events(misuse_trace(kind, P=4, debug=False, strict=False))
    assert paged[f"misuse rejected: {kind}"] == (kind in EVERY_MODE and kind != "paged_at_token")


@pytest.mark.parametrize("name, kind, mode", [
    ("ReleasesAWindowTwice", "swa_evicted_twice", {"strict": False}),
    ("ReleasesAWindowTwice", "swa_evicted_twice", {"debug": False}),
    ("ReleasesFullSlotsWithTheirPeer", "full_while_mapped", {}),
    ("AllocsAtAnyPageSize", "alloc_paged", {}),
    ("TailsOfAnyBatch", "tail_batch", {}),
    ("TailsOfAnyBatch", "tail_outside", {}),
    ("PagedCallsAtAnyPageSize", "paged_at_token", {}),
])
def test_a_misuse_taken_silently_is_reported(name, kind, mode):
    trace = misuse_trace(kind, **mode)
    found = divergence("swa", trace, double("swa", f"{__name__}:{name}"))
    assert found is not None and found.signature[3] == "rejection", found and found.report()
    assert kind in found.report()


def test_at_page_size_1_a_window_released_twice_is_seen_by_the_strict_checks_alone():
    trace = misuse_trace("swa_evicted_twice", P=1, debug=False)
    assert events(trace)["misuse rejected: swa_evicted_twice"] == 1
    assert divergence("swa", trace, "swa.torch") is None
    found = divergence("swa", trace, double("swa", f"{__name__}:ReleasesAWindowTwice"))
    assert found is not None and found.signature[3] == "rejection", found and found.report()
