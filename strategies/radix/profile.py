"""What a prefix cache may declare (`Implementation.preconditions`): that it does not support a
reset while requests are in flight, which SGLang's scheduler never does (its flush waits for
idle): its generator leaves that out, and a trace that has it is outside its contract
(`broken`); and that `insert` keeps the caller's key, whose token array the harness then leaves
as it is after the call (every in-tree caller hands over a fresh key). Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.radix.trace import RESET_IN_FLIGHT, Trace, resets_in_flight

NO_RESET_IN_FLIGHT = ("no reset while requests are in flight (SGLang's flush_cache runs only "
                      "when the scheduler is idle)")
KEEPS_KEY = ("keeps the caller's RadixKey (a new branch of a page-size-1 tree is the key object "
             "itself): the harness does not rewrite a key's token array after the call")
PRECONDITIONS = {RESET_IN_FLIGHT: NO_RESET_IN_FLIGHT}


def unsupported(preconditions) -> frozenset:
    """The misuse kinds the declared `preconditions` rule out."""
    return frozenset(kind for kind, text in PRECONDITIONS.items() if text in preconditions)


def broken(trace: Trace, preconditions) -> list[str]:
    if NO_RESET_IN_FLIGHT in preconditions and resets_in_flight(trace):
        return [NO_RESET_IN_FLIGHT]
    return []
