"""The `kvmanager` lock step's comparisons of single answers: a prefix hit (blocks per group, hit
tokens, shared-prefix boundary), a deferred free's popped blocks, and a call whose answer is
not compared."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import crash_problems, short


def ignored(expected, rejected, actual, raised) -> list:
    return []  # forgetting a finished request's bookkeeping: nothing to compare


def popped_compare(expected, rejected, actual, raised) -> list:
    if raised is not None:
        return crash_problems(raised)
    return [] if actual == expected else [
        ("deferred free", f"pop_blocks_for_free: expected blocks {short(expected)}, actual "
                          f"{short(actual)}")]


def boundary_of(actual, otherwise):
    try:
        return actual[2]
    except (TypeError, IndexError, KeyError):
        return otherwise


def hit_compare(expected, rejected, actual, raised) -> list:
    if raised is not None:
        return crash_problems(raised)
    return [] if list(actual) == list(expected) else hit_problems(expected, actual)


def hit_problems(expected, actual) -> list[tuple[str, str]]:
    try:
        blocks, hit, boundary = actual
    except (TypeError, ValueError):
        return [("prefix hit", f"expected (blocks per group, hit tokens, boundary), actual "
                               f"{short(actual)}")]
    if hit != expected[1] or blocks != expected[0]:
        return [("prefix hit", f"expected {expected[1]} tokens, blocks {short(expected[0])}; "
                               f"actual {hit} tokens, blocks {short(blocks)}")]
    return [("shared prefix boundary", f"expected {expected[2]}, actual {boundary}")]
