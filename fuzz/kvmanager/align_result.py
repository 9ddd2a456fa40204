"""What an `allocate_slots` of the reduced mode of Mamba "align" returns (`align.py`,
`align_external.py`): None, or two groups' distinct new blocks, full attention's none null (the
Mamba group's may hold nulls: placeholders for states it does not keep)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import crash_problems, short


def allocation_problems(expected, rejected, actual, raised) -> list[tuple[str, str]]:
    if raised is not None:
        return crash_problems(raised)
    if actual is None:
        return []
    try:  # the Mamba group's may hold nulls: placeholders for states not kept
        fresh = [b for group in actual for b in group if b]
        null = 0 in actual[0]
    except (TypeError, IndexError):
        return [("result", f"allocate_slots: expected None or blocks per group, actual "
                           f"{short(actual)}")]
    if len(actual) != 2 or null or len(set(fresh)) != len(fresh):
        return [("result", f"allocate_slots: expected two groups' distinct new blocks, full "
                           f"attention's none null, actual {short(actual)}")]
    return []
