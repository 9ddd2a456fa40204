"""The Mamba slot-allocator judge on the shared lock step (`kvfuzz.fuzz.engine.lockstep`): the
oracle (`oracle.mamba`) and an implementation driven as a scheduler drives them (one slot per
request, batches admitted through alloc groups), compared after every op: the slots returned, None
vs success, `available_size` and the planner's `schedulable_available_size` (where the class has
it: on a static pool the same count), the free list (exact order), and the invariants (every slot free, pre-
allocated or held, exactly once; slot 0 never)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import POISON, Call, Lockstep, handles, list_diff, short
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.oracle.mamba.model import MambaModel, new_slot_violations, state_violations
from kvfuzz.strategies.mamba import trace as mamba
from kvfuzz.strategies.mamba.trace import (Admit, AllocMany, Clear, Finish, FreeSlots, GroupBegin,
                                           GroupEnd)


class MambaLockstep(Lockstep):
    KINDS = mamba.KINDS
    EVENTS = ("alloc None", "alloc exact fit", "alloc ok", "alloc from the group", "free",
              "group begin", "group begin short", "group end", "group end with unused",
              "nested group begin", "clear", "clear in a group", "stray group end")
    OWNERSHIP = (f"slot {POISON} is what the caller wrote over the tensor it passed to free(), "
                 f"after the call: the allocator kept the caller's tensor, not a copy")

    def build_model(self, trace):
        self.rows: dict[int, list[int]] = {}   # live requests' slots
        self.seen: set[int] = set()            # rids ever used: never admitted twice
        return MambaModel(trace.size)

    def build_impl(self, trace, cls, device):
        from kvfuzz.impl.mamba.driver import MambaDriver  # imports torch

        return make(MambaDriver, cls, trace.size, device)

    @handles(Admit, AllocMany)
    def alloc(self, op):
        if op.rid in self.seen:
            return
        model = self.model
        n = 1 if isinstance(op, Admit) else \
            max(0, model.available_size() + op.count) if op.relative else op.count
        from_group = model.open and n == 1 and model.pending
        self.count("alloc from the group" if from_group else "alloc None"
                   if n > len(model.free) else "alloc exact fit"
                   if n == len(model.free) else "alloc ok")
        got = (yield Call(f"alloc({n}) for r{op.rid}", "alloc", (n,), compared=True)).actual
        self.seen.add(op.rid)
        if got is None:
            return []
        problems = [("new slots", text)
                    for text in new_slot_violations(op.rid, got, model.size, self.holders())]
        self.rows[op.rid] = got
        return problems

    @handles(Finish)
    def finish_requests(self, op: Finish):
        live = [r for r in dict.fromkeys(op.rids) if r in self.rows]
        if not live:
            return
        slots = [s for r in live for s in self.rows[r]]
        self.count("free")
        yield Call(f"finish {' '.join(f'r{r}' for r in live)}: free({short(slots, 60)})",
                   "free_slots", (slots,))
        for rid in live:
            del self.rows[rid]

    @handles(FreeSlots)
    def free_by_slot(self, op: FreeSlots):
        """A live guard's op: the engine's `free` of these slots; they leave whoever held them
        (a slot freed twice, or never handed out, stays a problem of the free list's)."""
        self.count("free")  # the generator's edge classes: a free is a free
        yield Call(f"free({short(list(op.slots), 60)})", "free_slots", (list(op.slots),))
        freed = set(op.slots)
        for rid in list(self.rows):
            self.rows[rid] = [slot for slot in self.rows[rid] if slot not in freed]

    @handles(GroupBegin)
    def group_begin(self, op: GroupBegin):
        model = self.model
        n = max(0, model.available_size() + op.count) if op.relative else op.count
        self.count("nested group begin" if model.open else "group begin short"
                   if n > len(model.free) else "group begin")
        yield Call(f"alloc_group_begin({n})", "group_begin", (n,))

    @handles(GroupEnd)
    def group_end(self, op: GroupEnd):
        model = self.model
        self.count("stray group end" if not model.open else "group end with unused"
                   if model.pending else "group end")
        yield Call("alloc_group_end()", "group_end")

    @handles(Clear)
    def clear(self, op: Clear):
        self.count("clear in a group" if self.model.open else "clear")
        yield Call("clear()", "clear")
        self.rows = {}

    def holders(self) -> dict[int, int]:
        return {slot: rid for rid, slots in self.rows.items() for slot in slots}

    def state(self, op) -> list[tuple[str, str]]:
        model, problems = self.model, []
        available, free = self.read("available_size"), self.read("free_list")
        if available > model.size:
            problems.append(("invariant", f"available_size {available} exceeds the capacity "
                                          f"{model.size}"))
        if available != model.available_size():
            problems.append(("available_size", f"expected {model.available_size()}, "
                                               f"actual {available}"))
        # What the scheduler admits by (`alloc_req_slots`): a pool that under-reports it starves
        # admission, one that over-reports it admits what alloc() then refuses.
        schedulable = self.read("schedulable_available_size")
        if schedulable is not None and schedulable != model.available_size():
            problems.append(("schedulable_available_size",
                             f"expected {model.available_size()}, actual {schedulable}"))
        if free != model.free:
            problems.append(("free list", list_diff(model.free, free)))
        found = state_violations(model.size, free, model.pending, self.holders())
        return problems + [("invariant", text) for text in found]
