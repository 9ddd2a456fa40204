"""What a Mamba slot allocator may declare it does not support (`Implementation.preconditions`):
group-protocol misuse a scheduler never does, or, for a class without them (SGLang's `MambaPool`
before 0.5.13, read from the class), alloc groups at all. Its generator leaves those ops out, and
a trace that has them is outside its contract (`broken`). Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.mamba.trace import (CLEAR_IN_GROUP, GROUPS, NESTED, STRAY_END, Trace,
                                           group_calls, protocol_misuse)

NO_NESTED = "no nested alloc_group_begin (SGLang's scheduler pairs every begin with an end)"
NO_CLEAR_IN_GROUP = "no clear() inside an alloc group (SGLang clears an idle pool)"
NO_STRAY_END = "no alloc_group_end() without a begin"
# Read from the class (`impl/mamba/state_pool.py`, `declare`): one without the group calls.
GROUP_CALLS = ("alloc_group_begin", "alloc_group_end")
NO_GROUPS = ("no alloc groups (alloc_group_begin, alloc_group_end): every slot is taken by "
             "alloc() itself, as SGLang's scheduler did before the groups existed")
PRECONDITIONS = {NESTED: NO_NESTED, CLEAR_IN_GROUP: NO_CLEAR_IN_GROUP, STRAY_END: NO_STRAY_END,
                 GROUPS: NO_GROUPS}


def unsupported(preconditions) -> frozenset:
    """The misuse kinds the declared `preconditions` rule out."""
    return frozenset(kind for kind, text in PRECONDITIONS.items() if text in preconditions)


def broken(trace: Trace, preconditions) -> list[str]:
    found = protocol_misuse(trace) | group_calls(trace)
    return [PRECONDITIONS[kind] for kind in sorted(found & unsupported(preconditions))]
