"""Stateful differential for the paged allocator object: drives the oracle (`oracle.allocator`) and
an implementation with the same trace, like a scheduler, and compares after every op the returned
slots, None vs success, rejections, `available_size`, the free list (exact order: the spec fixes
it), the staged pages (as a multiset), and the invariants. Every call into the implementation is
guarded: whatever it raises is a problem to report, never a crash of the harness.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.allocator.misuse import misuse_call
from kvfuzz.fuzz.allocator.scheduler import Call, Scheduler
from kvfuzz.fuzz.lockstep_calls import call_problems, crash_problems, guarded, list_diff, short
from kvfuzz.impl.allocator.driver import AllocatorDriver
from kvfuzz.impl.driver_calls import POISON
from kvfuzz.oracle.allocator.invariants import state_violations
from kvfuzz.oracle.allocator.model import AllocatorModel, Rejected
from kvfuzz.strategies.allocator.trace import Misuse, Trace

ALLOC_METHODS = ("alloc", "alloc_extend", "alloc_decode")


class Lockstep:
    """The oracle and one implementation side by side; `step(op)` returns the problems found."""

    def __init__(self, trace: Trace, cls, device: str = "cpu", reuse_page_ids: bool = True):
        """`cls`: the allocator class under test (upstream's constructor); `reuse_page_ids`:
        see `AllocatorDriver`."""
        self.trace = trace
        token = trace.interface == "token"
        self.model = AllocatorModel(trace.size, trace.page_size, trace.need_sort, trace.debug,
                                    token)
        self.sched = Scheduler(trace)
        self.log: list[str] = []
        self.events: Counter = Counter()  # edge classes hit, for the run summary
        self.impl, raised = guarded(AllocatorDriver, cls, trace.size, trace.page_size,
                                    trace.need_sort, trace.debug, device, token, reuse_page_ids)
        self.broken = crash_problems(raised, "constructor") if raised else []

    def step(self, op) -> tuple[Call | None, list[tuple[str, str]]]:
        if self.broken:
            return None, self.broken
        call = misuse_call(self.sched, op, self.model) if isinstance(op, Misuse) else \
            self.sched.resolve(op, self.model)
        if call is None:
            return None, []
        staged_before, in_group = bool(self.model.staged), self.model.group is not None
        expected, rejected = _run(self.model, call)
        self._count(call, expected, rejected, staged_before, in_group)
        actual, raised = guarded(_call, self.impl, call)
        problems = call_problems(call.method in ALLOC_METHODS, expected, rejected, actual, raised,
                                 _owner(call))
        if raised is None and rejected is None:
            problems += [("new slots", text) for text in self.sched.commit(call, actual)]
        state, raised = guarded(_state_of, self.impl)
        problems += crash_problems(raised, "state read") if raised else self._state(*state)
        problems += self._ownership(problems, state)
        self.log.append(f"{call.text} -> "
                        + (short(expected) if rejected is None else f"rejected ({rejected})"))
        return call, problems

    def _count(self, call: Call, expected, rejected, staged_before: bool, in_group: bool) -> None:
        if rejected is not None:
            self.events[f"misuse rejected: {call.misuse or call.method}"] += 1
        elif call.misuse:
            self.events[f"misuse accepted: {call.misuse}"] += 1
        elif call.method == "clear" and in_group:
            self.events["clear in a group"] += 1
        elif call.method in ALLOC_METHODS:
            self.events[f"{call.method} " + ("None" if expected is None else
                                             "exact fit" if not self.model.free else "ok")] += 1
        elif call.method:
            self.events[call.method] += 1
        if staged_before and not self.model.staged and call.method != "clear":
            self.events["merge"] += 1

    def _state(self, available: int, free: list[int], staged: list[int]) -> list[tuple[str, str]]:
        problems = []
        capacity = self.model.num_pages * self.model.page_size
        if available > capacity:
            problems.append(("invariant", f"available_size {available} exceeds the capacity "
                                          f"{capacity}"))
        if available != self.model.available_size():
            problems.append(("available_size", f"expected {self.model.available_size()}, "
                                               f"actual {available}"))
        if free != self.model.free:
            problems.append(("free list", list_diff(self.model.free, free)))
        if staged != self.model.staged and Counter(staged) != Counter(self.model.staged):
            problems.append(("staged pages", f"expected {short(sorted(self.model.staged))}, "
                                             f"actual {short(sorted(staged))} (as multisets)"))
        found = state_violations(self.model.num_pages, free, staged, self.model.pending_pages(),
                                 self.sched.holders)
        return problems + [("invariant", text) for text in found]

    def _ownership(self, problems, state) -> list[tuple[str, str]]:
        """Say so when the problems show the value the driver writes over the caller's tensors."""
        seen = set(state[1] + state[2]) if state else set()
        if problems and ({POISON, POISON // self.model.page_size} & seen
                         or any(str(POISON) in text for _, text in problems)):
            return [("ownership", f"page {POISON} (or {POISON} // page size) is what the caller "
                                  f"wrote over every tensor it passed in, after the call: the "
                                  f"allocator kept a caller's tensor, not a copy")]
        return []


def _state_of(impl) -> tuple[int, list[int], list[int]]:
    return impl.available_size(), impl.free_list(), impl.staged()


def _run(model: AllocatorModel, call: Call):
    try:
        return _call(model, call), None
    except Rejected as error:
        return None, error


def _call(side, call: Call):
    return getattr(side, call.method)(*call.args) if call.method else None




def _owner(call: Call):
    def where(index: int) -> str:
        for rid, start, n in zip(call.rids, call.starts, call.lens):
            if index < n:
                return f"request r{rid} position {start + index}"
            index -= n
        return "past the end"
    return where
