"""What a Mamba slot allocator may declare it does not support (`Implementation.preconditions`):
group-protocol misuse a scheduler never does. Its generator leaves that misuse out, and a trace
that has it is outside its contract (`broken`). Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.mamba.trace import CLEAR_IN_GROUP, NESTED, STRAY_END, Trace, protocol_misuse

NO_NESTED = "no nested alloc_group_begin (SGLang's scheduler pairs every begin with an end)"
NO_CLEAR_IN_GROUP = "no clear() inside an alloc group (SGLang clears an idle pool)"
NO_STRAY_END = "no alloc_group_end() without a begin"
PRECONDITIONS = {NESTED: NO_NESTED, CLEAR_IN_GROUP: NO_CLEAR_IN_GROUP, STRAY_END: NO_STRAY_END}


def unsupported(preconditions) -> frozenset:
    """The misuse kinds the declared `preconditions` rule out."""
    return frozenset(kind for kind, text in PRECONDITIONS.items() if text in preconditions)


def broken(trace: Trace, preconditions) -> list[str]:
    return [PRECONDITIONS[kind] for kind in sorted(protocol_misuse(trace)
                                                   & unsupported(preconditions))]
