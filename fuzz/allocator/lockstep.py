"""The paged allocator object's judge on the shared lock step (`kvfuzz.fuzz.engine.lockstep`): the
oracle (`oracle.allocator`) and an implementation driven with the same trace, like a scheduler
(`scheduler.py` plans each op's call; `misuse.py` the wrong calls a buggy caller makes),
compared after every op: the returned slots, None vs success, rejections, `available_size`, the
free list (exact order: the spec fixes it), the staged pages (as a multiset), and the
invariants. A class with the offload calls also has each allocation's slots sent to host memory
and back (`get_cpu_copy`, `load_cpu_copy`): each must reach the KV cache it was built with,
with those slots, and leave the allocator as it was.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.allocator.misuse import misuse_call
from kvfuzz.fuzz.allocator.scheduler import Planned, Scheduler
from kvfuzz.fuzz.engine.lockstep import (POISON, Call, Lockstep, call_problems, handles,
                                         list_diff, short)
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.oracle.allocator.invariants import state_violations
from kvfuzz.oracle.allocator.model import AllocatorModel, Rejected
from kvfuzz.strategies.allocator import trace as allocator
from kvfuzz.strategies.allocator.profile import SEEN_AFTER_RELEASE
from kvfuzz.strategies.allocator.trace import ALL_MISUSES, FREE_HOWS, Misuse

ALLOC_METHODS = ("alloc", "alloc_extend", "alloc_decode")
RELEASES = ("free_slots", "free_segment", "free_segments", "free_page_ids", "group_begin",
            "group_end")


class AllocatorLockstep(Lockstep):
    KINDS = allocator.KINDS
    # Calls and their edge classes, merges of staged pages, the misuse each side saw.
    EVENTS = (*(f"{m} {how}" for m in ALLOC_METHODS for how in ("None", "exact fit", "ok")),
              *RELEASES, "clear", "clear in a group", "merge",
              "misuse accepted: group_end_unopened",
              # a double free inside a group, staged there, reported at its end (a class
              # that checks after the release)
              *(f"misuse accepted: {kind}" for kind in SEEN_AFTER_RELEASE),
              *(f"misuse rejected: {kind}"
                for kind in ALL_MISUSES + ALLOC_METHODS + RELEASES))
    REJECTIONS = (Rejected,)
    offloads = False  # the class has get_cpu_copy / load_cpu_copy (a live guard: not asked)
    OWNERSHIP = (f"page {POISON} (or {POISON} // page size) is what the caller wrote over every "
                 f"tensor it passed in, after the call: the allocator kept a caller's tensor, "
                 f"not a copy")

    def build_model(self, trace):
        self.sched = Scheduler(trace)
        return AllocatorModel(trace.size, trace.page_size, trace.need_sort, trace.debug,
                              trace.interface == "token",
                              self.options.get("checks_after_release", False))

    def build_impl(self, trace, cls, device, reuse_page_ids: bool = True,
                   checks_after_release: bool = False, hows=FREE_HOWS):
        """`reuse_page_ids`: see `AllocatorDriver`; `checks_after_release` and `hows` (the
        release calls the class has): what it declares, which the oracle and the buggy
        caller follow (`AllocatorModel`, `misuse.py`)."""
        from kvfuzz.impl.allocator.driver import AllocatorDriver, offloads  # imports torch

        self.offloads = offloads(cls)
        return make(AllocatorDriver, cls, trace.size, trace.page_size, trace.need_sort, trace.debug,
                               device, trace.interface == "token", reuse_page_ids)

    @handles(*allocator.KINDS.values())
    def call(self, op):
        """Every op: the one call the scheduler (or, for a misuse, the buggy caller) plans; none
        once a double free reported after its release has left the free list corrupted."""
        if self.model.corrupted:
            return
        hows = self.options.get("hows", FREE_HOWS)
        planned = misuse_call(self.sched, op, self.model, hows) if isinstance(op, Misuse) else \
            self.sched.resolve(op, self.model)
        if planned is None:
            return
        staged_before, in_group = bool(self.model.staged), self.model.group is not None

        def answer():  # the oracle's, counted as it answers (a refusal included)
            try:
                expected = getattr(self.model, planned.method)(*planned.args) \
                    if planned.method else None
            except Rejected as error:
                self._count(planned, None, error, staged_before, in_group)
                raise
            self._count(planned, expected, None, staged_before, in_group)
            return expected

        result = yield Call(planned.text, planned.method, planned.args, oracle=answer,
                            compared=planned.method in ALLOC_METHODS, where=_owner(planned))
        problems = [("new slots", text) for text in self.sched.commit(planned, result.actual)]
        if self.offloads and planned.method in ALLOC_METHODS and result.actual and not problems:
            slots = list(result.actual)
            yield Call("then get_cpu_copy, load_cpu_copy of them", "offload_roundtrip",
                       (slots,), oracle=lambda: offloaded(slots), compare=_offload_problems)
        return problems

    def _count(self, call: Planned, expected, rejected, staged_before: bool,
               in_group: bool) -> None:
        if rejected is not None:
            self.count(f"misuse rejected: {call.misuse or call.method}")
        elif call.misuse:
            self.count(f"misuse accepted: {call.misuse}")
        elif call.method == "clear" and in_group:
            self.count("clear in a group")
        elif call.method in ALLOC_METHODS:
            self.count(f"{call.method} " + ("None" if expected is None else
                                            "exact fit" if not self.model.free else "ok"))
        elif call.method:
            self.count(call.method)
        if staged_before and not self.model.staged and call.method != "clear":
            self.count("merge")

    def state(self, op) -> list[tuple[str, str]]:
        available = self.read("available_size")
        free, staged = self.read("free_list"), self.read("staged")
        model, problems = self.model, []
        capacity = model.num_pages * model.page_size
        caller_fault = model.corrupted or model.fault_pending
        if available > capacity and not caller_fault:
            problems.append(("invariant", f"available_size {available} exceeds the capacity "
                                          f"{capacity}"))
        if available != model.available_size():
            problems.append(("available_size", f"expected {model.available_size()}, "
                                               f"actual {available}"))
        if free != model.free:
            problems.append(("free list", list_diff(model.free, free)))
        if staged != model.staged and Counter(staged) != Counter(model.staged):
            problems.append(("staged pages", f"expected {short(sorted(model.staged))}, "
                                             f"actual {short(sorted(staged))} (as multisets)"))
        if caller_fault:  # the caller's double free is on the free list, or will be: not a fault
            return problems
        found = state_violations(model.num_pages, free, staged, model.pending_pages(),
                                 self.sched.holders)
        return problems + [("invariant", text) for text in found]

    def poisoned(self) -> set[int]:
        """The poisoned slot, or its page id (free and staged lists hold pages)."""
        return {POISON, POISON // self.model.page_size}


def offloaded(slots: list[int]) -> list:
    """What reaches the KV cache when a request's `slots` go to host memory and back: the
    allocator passes both calls on, with those slots, and returns and loads the cache's copy
    (`AllocatorDriver.offload_roundtrip`)."""
    return [["get_cpu_copy", slots, 1], ["load_cpu_copy", slots, 1]]


def _offload_problems(expected, rejected, actual, raised) -> list[tuple[str, str]]:
    if raised is None and actual is None:  # the release's base class: not offered
        return []
    problems = call_problems(True, expected, rejected, actual, raised)
    return [("offload" if field == "result" else field, text) for field, text in problems]


def _owner(call: Planned):
    def where(index: int) -> str:
        for entry, (rid, start, n) in enumerate(zip(call.rids, call.starts, call.lens)):
            if index < n:
                who = f"batch entry {entry}" if call.engine is not None else f"request r{rid}"
                return f"{who} position {start + index}"
            index -= n
        return "past the end"
    return where
