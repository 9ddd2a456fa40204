"""What an SWA allocator may declare (`Implementation.preconditions`): that it is only called
after the scheduler's memory check. Its generator then checks every decode, and a trace with an
unchecked decode is outside its contract (`broken`). Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.swa.trace import Trace, unchecked_decodes

CHECKED_DECODE = ("alloc_decode only after the scheduler checked both pools have room "
                  "(SGLang's check_decode_mem retracts requests first)")


def checked_only(preconditions) -> bool:
    return CHECKED_DECODE in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    return [CHECKED_DECODE] if checked_only(preconditions) and unchecked_decodes(trace) else []
