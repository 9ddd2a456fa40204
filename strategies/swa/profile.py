"""What an SWA allocator may declare (`Implementation.preconditions`): that it is only called
after the scheduler's memory check (its generator then checks every decode, and a trace with an
unchecked decode is outside its contract: `broken`), and, for an earlier release's class read
as installed, that it has no segment releases, or no reclaim, resize, offload or tail calls.
Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.swa.scheduler_ops import Cache, Offload, Reclaim, Resize
from kvfuzz.strategies.swa.trace import (ExtendTail, FreeSegments, GroupBegin, GroupEnd, Trace,
                                         unchecked_decodes)

CHECKED_DECODE = ("alloc_decode only after the scheduler checked both pools have room "
                  "(SGLang's check_decode_mem retracts requests first)")
NO_SEGMENT = ("no free_swa_segment, free_full_segment or free_segment (an earlier SGLang "
              "release): windows and requests are released by slot sets")
# The Triton allocation kernels' precondition (`impl/paged`'s POW2, the same text): an SGLang
# release whose paged allocator launches them on every call (before 0.5.22) takes no other page
# size (`tl.arange` of the page size). Read from the class, not from its version.
POW2_PAGES = "power-of-two page size"
# The calls a release by segment makes (`how="segment"`): a class lacking one declares NO_SEGMENT.
SEGMENT_CALLS = ("free_swa_segment", "free_full_segment", "free_segment")
# The other calls a class may lack, by the generator's name for them: (precondition, the calls,
# the ops that make them).
LACKING = {
    "reclaim": ("no evict_to_free_tokens or reclaim_for_prealloc: room is not reclaimed "
                "through the prefix cache", ("evict_to_free_tokens", "reclaim_for_prealloc"),
                (Cache, Reclaim)),
    "resize": ("no resize: the pools keep the sizes they were built with", ("resize",),
               (Resize,)),
    "offload": ("no get_cpu_copy or load_cpu_copy: no KV offload", ("get_cpu_copy",
                                                                    "load_cpu_copy"), (Offload,)),
    # Never read from a class (every release has the calls): declared by the history pass
    # `sglang.swa.ungrouped`, which sees past F and C (docs/release-history.md) on the same
    # builds without free groups. Not a contract.
    "group": ("no free groups: releases are not batched (a history pass behind findings F and "
              "C, not a contract)", ("free_group_begin", "free_group_end"),
              (GroupBegin, GroupEnd)),
    # (SGLang before 0.5.12: a decode server's admission allocated both pools in full)
    "tail": ("no alloc_extend_swa_tail: no request is admitted with SWA slots for its tail "
             "only", ("alloc_extend_swa_tail",), (ExtendTail,)),
}


def lacking(preconditions) -> tuple[str, ...]:
    """The names of `LACKING` whose precondition is declared."""
    return tuple(name for name, (text, _, _) in LACKING.items() if text in preconditions)


def checked_only(preconditions) -> bool:
    return CHECKED_DECODE in preconditions


def pow2_only(preconditions) -> bool:
    return POW2_PAGES in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    found = [CHECKED_DECODE] if checked_only(preconditions) and unchecked_decodes(trace) else []
    if pow2_only(preconditions) and trace.page_size & (trace.page_size - 1):
        found.append(POW2_PAGES)
    if NO_SEGMENT in preconditions and any(getattr(op, "how", "") == "segment" or isinstance(
            op, FreeSegments) for op in trace.ops):
        found.append(NO_SEGMENT)
    for name in lacking(preconditions):
        text, _, ops = LACKING[name]
        if any(isinstance(op, ops) for op in trace.ops):
            found.append(text)
    return found
