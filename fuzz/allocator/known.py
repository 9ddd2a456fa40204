"""Documented ways the released upstream allocator (sglang 0.5.23) legitimately differs from the
oracle. A divergence of an OUTSIDE implementation that matches one is reported as a known
difference (counted and printed, never hidden); bundled implementations are never classified."""

from __future__ import annotations

P1_DECODE = ("page_size 1 alloc_decode: upstream get_num_new_pages(decode=True) counts seq % P == 1, "
             "0 for P == 1 (spec §3, §8.6), so it hands out last_loc + 1 instead of a new page; "
             "SGLang never sends page_size-1 decode to the paged allocator")
LATE_DOUBLE_FREE = ("double free reported after the release: upstream's debug duplicate check runs "
                    "after the pages were prepended or staged (spec §4.8), so it raises but the "
                    "free list keeps the duplicate")
NO_RANGE_CHECK = ("upstream does not check released page ids: page 0 or a page past the pool goes "
                  "onto the free list (spec §0 only reserves page 0; rejecting it is kvfuzz "
                  "hardening)")
STATE_LABELS = {"available_size", "free list", "staged pages", "invariant"}


def classify(trace, call, problems) -> str | None:
    labels = {label for label, _ in problems}
    if call.method == "alloc_decode" and trace.page_size == 1 and call.misuse is None:
        return P1_DECODE
    if call.misuse in ("double_free", "free_unallocated") and "rejection" not in labels \
            and labels <= STATE_LABELS:
        return LATE_DOUBLE_FREE
    if call.misuse in ("free_page0", "free_out_of_range") and labels <= STATE_LABELS | {"rejection"}:
        return NO_RANGE_CHECK
    return None
