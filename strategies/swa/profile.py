"""What an SWA allocator may declare (`Implementation.preconditions`): that it is only called
after the scheduler's memory check (its generator then checks every decode, and a trace with an
unchecked decode is outside its contract: `broken`), and, for an earlier release's class read
as installed, that it has no segment releases. Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.swa.trace import FreeSegments, Trace, unchecked_decodes

CHECKED_DECODE = ("alloc_decode only after the scheduler checked both pools have room "
                  "(SGLang's check_decode_mem retracts requests first)")
NO_SEGMENT = ("no free_swa_segment, free_full_segment or free_segment (an earlier SGLang "
              "release): windows and requests are released by slot sets")
# The calls a release by segment makes (`how="segment"`): a class lacking one declares NO_SEGMENT.
SEGMENT_CALLS = ("free_swa_segment", "free_full_segment", "free_segment")


def checked_only(preconditions) -> bool:
    return CHECKED_DECODE in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    found = [CHECKED_DECODE] if checked_only(preconditions) and unchecked_decodes(trace) else []
    if NO_SEGMENT in preconditions and any(getattr(op, "how", "") == "segment" or isinstance(
            op, FreeSegments) for op in trace.ops):
        found.append(NO_SEGMENT)
    return found
