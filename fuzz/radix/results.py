"""How the radix judge compares a call's result with the model's (`Call`'s `compare`): match
lengths and slots, allocations (None vs success, the number of slots), eviction counts, and a
stale unlock that may be refused. Plain functions, apart from the op handlers that name them
(`lockstep.py`)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import crash_problems, short


def match_compare(expected, rejected, actual, raised) -> list[tuple[str, str]]:
    if raised is not None:
        return crash_problems(raised)
    if expected == actual:
        return []
    if expected[0] != actual[0]:
        return [("match", f"matched {actual[0]} tokens, expected {expected[0]}")]
    return [("match", f"device indices of the {expected[0]} matched tokens: expected "
                      f"{short(expected[1], 60)}, actual {short(actual[1], 60)}")]


def alloc_compare(expected, rejected, actual, raised) -> list[tuple[str, str]]:
    if raised is not None:
        return crash_problems(raised)
    if (expected is None) != (actual is None):
        return [("None vs success", f"expected {'None' if expected is None else expected} "
                                    f"slots, actual {short(actual)}")]
    if actual is not None and len(actual) != expected:
        return [("alloc", f"expected {expected} slots, actual {len(actual)}")]
    return []


def evict_compare(num, evictable, expected, actual, raised) -> list[tuple[str, str]]:
    if raised is not None:
        return crash_problems(raised)
    if actual < min(num, evictable):
        return [("eviction", f"evict({num}) freed {actual} tokens while {evictable} were "
                             f"evictable: short of what was asked")]
    if actual != expected:
        return [("eviction", f"evict({num}) freed {actual} tokens, expected {expected}")]
    return []


def refusal_allowed(expected, rejected, actual, raised) -> list[tuple[str, str]]:
    """A void lock's release may be refused (raise) or ignored; the state says if it changed
    anything."""
    return []
