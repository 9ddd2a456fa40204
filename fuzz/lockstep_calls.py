"""What the lock-step trace targets share when they call an implementation under test: a raise
is an outcome to report (never a crash of the harness), and what differs is described in one
style, with the numbers."""

from __future__ import annotations

import traceback


def guarded(fn, *args):
    """(result, None), or (None, the exception) when the implementation under test raised."""
    try:
        return fn(*args), None
    except (Exception, SystemExit) as error:  # noqa: BLE001 - a raise is an outcome to compare
        return None, error


def crash_problems(error: Exception, where: str = "") -> list[tuple[str, str]]:
    frames = traceback.format_exception(error)[-3:]
    head = f"{type(error).__name__}: {error}" + (f" (in the {where})" if where else "")
    return [("crash", head)] + [("crash", line.rstrip()) for chunk in frames
                                for line in chunk.splitlines()[-2:]]


def list_diff(expected: list[int], actual: list[int], where=None) -> str:
    at = next((i for i, (e, a) in enumerate(zip(expected, actual)) if e != a),
              min(len(expected), len(actual)))
    lo = max(0, at - 2)
    place = f" ({where(at)})" if where else ""
    return (f"first difference at index {at}{place}: expected [{lo}:] {expected[lo:lo + 8]}, "
            f"actual [{lo}:] {actual[lo:lo + 8]}; lengths {len(expected)} vs {len(actual)}")


def short(value, width: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def call_problems(allocates: bool, expected, rejected, actual, raised,
                  where=None) -> list[tuple[str, str]]:
    """What differs between the oracle's side of one call (`expected`, or `rejected`: the
    oracle's reason to refuse it) and the implementation's (`actual`, or `raised`). Results are
    compared only for allocating calls; `where(index)` names an output position."""
    if rejected is not None:
        if raised is None:
            return [("rejection", f"expected the call to be rejected ({rejected}), but it was "
                                  f"accepted and returned {short(actual)}")]
        return []
    if raised is not None:
        return crash_problems(raised)
    if not allocates or expected == actual:
        return []
    if expected is None or actual is None:
        return [("None vs success", f"expected {short(expected)}, actual {short(actual)}")]
    return [("result", list_diff(expected, actual, where))]
