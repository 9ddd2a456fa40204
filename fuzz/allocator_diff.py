"""Stateful differential for the paged allocator object: drives the oracle (`oracle.allocator`) and
an implementation with the same trace, like a scheduler, and compares after every op the returned
slots, None vs success, rejections, `available_size`, the free list (exact order: the spec fixes
it), the staged pages (as a multiset), and the invariants.

    divergence = run_trace(generate_trace(seed, index), "allocator.torch")
    if divergence: print(divergence.report())
"""

from __future__ import annotations

import shlex
import traceback
from collections import Counter
from dataclasses import dataclass, field

from kvfuzz.fuzz.allocator_sched import Call, Scheduler
from kvfuzz.oracle.allocator.model import AllocatorModel, Rejected
from kvfuzz.oracle.allocator.invariants import state_violations
from kvfuzz.strategies.allocator.trace import Trace, describe_op

ALLOC_METHODS = ("alloc", "alloc_extend", "alloc_decode")


@dataclass
class AllocatorDivergence:
    """The first op where the implementation disagreed: what, where, and how to replay it.
    `problems` holds (label, text); the label (field or invariant) is what dedup keys on."""

    impl: str
    trace: Trace
    op_index: int
    call: str
    problems: list[tuple[str, str]]
    context: list[str] = field(default_factory=list)
    known: str | None = None      # a classified, documented upstream difference
    saved_path: str | None = None
    shrunk_from: str | None = None  # "<origin>, N ops" of the trace before shrinking

    def key(self) -> tuple:
        op = type(self.trace.ops[self.op_index]).__name__
        return (self.impl, op, self.problems[0][0] if self.problems else "", self.known)

    def corpus_name(self) -> str:
        return f"allocator-{self.trace.trace_id()}.json"

    def replay_command(self) -> str:
        path = self.saved_path or f"corpus/{self.corpus_name()}"
        return f"kvfuzz replay {shlex.quote(path)} --impl {shlex.quote(self.impl)}"

    def headline(self) -> str:
        label, text = self.problems[0]
        return f"allocator {self.impl}: op {self.op_index} ({self.call}): {label}: {text}"

    def report(self, limit: int = 10) -> str:
        trace, origin = self.trace, self.trace.origin
        lines = [("KNOWN UPSTREAM DIFFERENCE" if self.known else "DIVERGENCE")
                 + f"  allocator  implementation {self.impl}",
                 f"  trace     {trace.trace_id()}"
                 + (f"  ({origin.describe()})" if origin else
                    f"  (shrunk from {self.shrunk_from})" if self.shrunk_from else
                    "  (hand-written)"),
                 f"  pool      {trace.describe()}",
                 f"  at op     {self.op_index} of {len(trace.ops)}: "
                 f"{describe_op(trace.ops[self.op_index])}",
                 f"  call      {self.call}"]
        lines += [f"  before    {line}" for line in self.context]
        for label, text in self.problems[:limit]:
            lines.append(f"  {label:<9} {text}" if len(label) <= 9 else f"  {label}: {text}")
        if len(self.problems) > limit:
            lines.append(f"  ... and {len(self.problems) - limit} more")
        if self.known:
            lines.append(f"  known     {self.known}")
        lines.append(f"  replay    {self.replay_command()}")
        return "\n".join(lines)


class Lockstep:
    """The oracle and one implementation side by side; `step(op)` returns the problems found."""

    def __init__(self, trace: Trace, impl_spec: str, device: str = "cpu"):
        from kvfuzz.impl.allocator.driver import AllocatorDriver
        from kvfuzz.impl.allocator_registry import resolve_allocator

        self.trace = trace
        self.model = AllocatorModel(trace.size, trace.page_size, trace.need_sort, trace.debug)
        cls = resolve_allocator(impl_spec).load()
        self.impl = AllocatorDriver(cls, trace.size, trace.page_size, trace.need_sort,
                                    trace.debug, device)
        self.sched = Scheduler(trace)
        self.log: list[str] = []
        self.events: Counter = Counter()  # edge classes hit, for the run summary

    def step(self, op) -> tuple[Call | None, list[tuple[str, str]]]:
        call = self.sched.resolve(op, self.model)
        if call is None:
            return None, []
        staged_before = bool(self.model.staged)
        expected, rejected = _run(self.model, call)
        self._count(call, expected, rejected, staged_before)
        try:
            actual, raised = _call(self.impl, call), None
        except Exception as error:  # noqa: BLE001 - a raise is an outcome to compare
            actual, raised = None, error
        problems = _outcome(call, expected, rejected, actual, raised)
        if raised is None and rejected is None:
            problems += [("new slots", text) for text in self.sched.commit(call, actual)]
        problems += self._state()
        self.log.append(f"{call.text} -> "
                        + (_short(expected) if rejected is None else f"rejected ({rejected})"))
        return call, problems

    def _count(self, call: Call, expected, rejected, staged_before: bool) -> None:
        if rejected is not None:
            self.events[f"misuse rejected: {call.misuse or call.method}"] += 1
        elif call.method in ALLOC_METHODS:
            self.events[f"{call.method} " + ("None" if expected is None else
                                             "exact fit" if not self.model.free else "ok")] += 1
        elif call.method:
            self.events[call.method] += 1
        if staged_before and not self.model.staged and call.method != "clear":
            self.events["merge"] += 1

    def _state(self) -> list[tuple[str, str]]:
        problems = []
        want, got = self.model.available_size(), self.impl.available_size()
        if want != got:
            problems.append(("available_size", f"expected {want}, actual {got}"))
        free = self.impl.free_list()
        if free != self.model.free:
            problems.append(("free list", _list_diff(self.model.free, free)))
        staged = self.impl.staged()
        if staged != self.model.staged and Counter(staged) != Counter(self.model.staged):
            problems.append(("staged pages", f"expected {_short(sorted(self.model.staged))}, "
                                             f"actual {_short(sorted(staged))} (as multisets)"))
        found = state_violations(self.model.num_pages, free, staged, self.model.pending_pages(),
                                 self.sched.holders)
        return problems + [("invariant", text) for text in found]


def _run(model: AllocatorModel, call: Call):
    try:
        return _call(model, call), None
    except Rejected as error:
        return None, error


def _call(side, call: Call):
    return getattr(side, call.method)(*call.args) if call.method else None


def _outcome(call: Call, expected, rejected, actual, raised) -> list[tuple[str, str]]:
    if rejected is not None:
        if raised is None:
            return [("rejection", f"expected the call to be rejected ({rejected}), but it was "
                                  f"accepted and returned {_short(actual)}")]
        return []
    if raised is not None:
        frames = traceback.format_exception(raised)[-3:]
        return [("crash", f"{type(raised).__name__}: {raised}")] + \
            [("crash", line.rstrip()) for chunk in frames for line in chunk.splitlines()[-2:]]
    if call.method not in ALLOC_METHODS or expected == actual:
        return []
    if expected is None or actual is None:
        return [("None vs success", f"expected {_short(expected)}, actual {_short(actual)}")]
    return [("result", _list_diff(expected, actual, _owner(call)))]


def _owner(call: Call):
    def where(index: int) -> str:
        for rid, start, n in zip(call.rids, call.starts, call.lens):
            if index < n:
                return f"request r{rid} position {start + index}"
            index -= n
        return "past the end"
    return where


def _list_diff(expected: list[int], actual: list[int], where=None) -> str:
    at = next((i for i, (e, a) in enumerate(zip(expected, actual)) if e != a),
              min(len(expected), len(actual)))
    lo = max(0, at - 2)
    place = f" ({where(at)})" if where else ""
    return (f"first difference at index {at}{place}: expected [{lo}:] {expected[lo:lo + 8]}, "
            f"actual [{lo}:] {actual[lo:lo + 8]}; lengths {len(expected)} vs {len(actual)}")


def _short(value, width: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def run_trace(trace: Trace, impl_spec: str, device: str = "cpu", outside: bool | None = None,
              events: Counter | None = None) -> AllocatorDivergence | None:
    """Apply every op to oracle and implementation; the first op with any problem diverges.
    For outside classes, a divergence matching a documented upstream difference is classified."""
    from kvfuzz.fuzz.allocator_known import classify

    lock = Lockstep(trace, impl_spec, device)
    for index, op in enumerate(trace.ops):
        call, problems = lock.step(op)
        if events is not None and problems:
            events.update(lock.events)
        if problems:
            # The call line carries the oracle's answer ("-> None", "-> [..]", "-> rejected").
            divergence = AllocatorDivergence(impl_spec, trace, index, lock.log[-1], problems,
                                             lock.log[-4:-1])
            if outside if outside is not None else ":" in impl_spec:
                divergence.known = classify(trace, call, problems)
            return divergence
    if events is not None:
        events.update(lock.events)
    return None
