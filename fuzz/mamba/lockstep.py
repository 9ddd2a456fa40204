"""Stateful differential for Mamba slot allocators: drives the oracle (`oracle.mamba`) and an
implementation with the same trace, as a scheduler does (one slot per request, batches admitted
through alloc groups), and compares after every op: the slots returned, None vs success,
`available_size`, the free list (exact order), and the invariants (every slot free,
pre-allocated or held, exactly once; slot 0 never). Every call into the implementation is
guarded: whatever it raises is a problem to report, never a crash of the harness.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.lockstep_calls import crash_problems, guarded, list_diff, short
from kvfuzz.impl.mamba.driver import MambaDriver
from kvfuzz.impl.driver_calls import POISON
from kvfuzz.oracle.mamba.model import MambaModel, new_slot_violations, state_violations
from kvfuzz.strategies.mamba.trace import (Admit, AllocMany, Clear, Finish, GroupBegin, GroupEnd,
                                           Trace)


class Lockstep:
    """The oracle and one implementation side by side; `step(op)` returns the problems found."""

    def __init__(self, trace: Trace, cls, device: str = "cpu"):
        self.model = MambaModel(trace.size)
        self.rows: dict[int, list[int]] = {}   # live requests' slots
        self.seen: set[int] = set()            # rids ever used: never admitted twice
        self.log: list[str] = []
        self.events: Counter = Counter()  # target.EVENTS: calls and their edge classes
        self.impl, raised = guarded(MambaDriver, cls, trace.size, device)
        self.broken = crash_problems(raised, "constructor") if raised else []

    def step(self, op) -> tuple[str | None, list[tuple[str, str]]]:
        """(the call `op` stood for, or None when it resolved to nothing; the problems)."""
        if self.broken:
            return None, self.broken
        call = self._resolve(op)
        if call is None:
            return None, []
        method, args, text, rid = call
        self._count(method, args)
        expected = getattr(self.model, method)(*args)
        actual, raised = guarded(getattr(self.impl, method), *args)
        problems = crash_problems(raised) if raised else _compare(method, expected, actual)
        if raised is None:
            problems += self._commit(op, method, actual, rid)
        state, raised = guarded(lambda: (self.impl.available_size(), self.impl.free_list()))
        problems += crash_problems(raised, "state read") if raised else self._state(*state)
        if problems and (POISON in (state or (0, []))[1] or any(str(POISON) in line
                                                                 for _, line in problems)):
            problems.append(("ownership", f"slot {POISON} is what the caller wrote over the "
                                          f"tensor it passed to free(), after the call: the "
                                          f"allocator kept the caller's tensor, not a copy"))
        self.log.append(f"{text} -> {short(expected)}")
        return text, problems

    def _resolve(self, op):
        """(method, args, text, rid receiving slots or None), or None."""
        available = self.model.available_size()
        if isinstance(op, (Admit, AllocMany)):
            if op.rid in self.seen:
                return None
            n = 1 if isinstance(op, Admit) else \
                max(0, available + op.count) if op.relative else op.count
            return "alloc", (n,), f"alloc({n}) for r{op.rid}", op.rid
        if isinstance(op, Finish):
            live = [r for r in dict.fromkeys(op.rids) if r in self.rows]
            if not live:
                return None
            slots = [s for r in live for s in self.rows[r]]
            return "free_slots", (slots,), (f"finish {' '.join(f'r{r}' for r in live)}: "
                                            f"free({short(slots, 60)})"), None
        if isinstance(op, GroupBegin):
            n = max(0, available + op.count) if op.relative else op.count
            return "group_begin", (n,), f"alloc_group_begin({n})", None
        if isinstance(op, GroupEnd):
            return "group_end", (), "alloc_group_end()", None
        if isinstance(op, Clear):
            return "clear", (), "clear()", None
        return None

    def _count(self, method: str, args) -> None:
        model = self.model
        if method == "alloc":
            from_group = model.open and args[0] == 1 and model.pending
            self.events["alloc from the group" if from_group else "alloc None"
                        if args[0] > len(model.free) else "alloc exact fit"
                        if args[0] == len(model.free) else "alloc ok"] += 1
        elif method == "group_begin":
            self.events["nested group begin" if model.open else "group begin short"
                        if args[0] > len(model.free) else "group begin"] += 1
        elif method == "group_end":
            self.events["stray group end" if not model.open else "group end with unused"
                        if model.pending else "group end"] += 1
        elif method == "clear":
            self.events["clear in a group" if model.open else "clear"] += 1
        else:
            self.events["free"] += 1

    def _commit(self, op, method: str, actual, rid) -> list[tuple[str, str]]:
        if method == "alloc":
            self.seen.add(rid)
            if actual is None:
                return []
            holders = self.holders()
            self.rows[rid] = actual
            return [("new slots", text)
                    for text in new_slot_violations(rid, actual, self.model.size, holders)]
        if method == "free_slots":
            for r in op.rids:
                self.rows.pop(r, None)
        elif method == "clear":
            self.rows = {}
        return []

    def holders(self) -> dict[int, int]:
        return {slot: rid for rid, slots in self.rows.items() for slot in slots}

    def _state(self, available: int, free: list[int]) -> list[tuple[str, str]]:
        model, problems = self.model, []
        if available > model.size:
            problems.append(("invariant", f"available_size {available} exceeds the capacity "
                                          f"{model.size}"))
        if available != model.available_size():
            problems.append(("available_size", f"expected {model.available_size()}, "
                                               f"actual {available}"))
        if free != model.free:
            problems.append(("free list", list_diff(model.free, free)))
        found = state_violations(model.size, free, model.pending, self.holders())
        return problems + [("invariant", text) for text in found]


def _compare(method: str, expected, actual) -> list[tuple[str, str]]:
    if method != "alloc" or expected == actual:
        return []
    if expected is None or actual is None:
        return [("None vs success", f"expected {short(expected)}, actual {short(actual)}")]
    return [("result", list_diff(expected, actual))]
