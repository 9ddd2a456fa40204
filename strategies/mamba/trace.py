"""The Mamba trace: a scheduler's operations on a Mamba state-slot allocator (upstream
`MambaSlotAllocator`: one slot per request, slot 0 reserved, alloc groups that pre-allocate a
batch), and its version-stable JSON form ("kvfuzz-mamba-trace/1"). Standard library only.

Ops name requests by id (`rid`); they resolve at run time against the live requests, so a trace
stays valid when a shrinker drops ops or requests. Group ops are never dropped at run time: a
begin inside an open group is a nested begin, a clear inside one clears it, an end with none
open is a stray end (`protocol_misuse` finds them without running anything).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import (Origin, dataclass_op_to_json, document_id,
                                      provenance)

FORMAT = "kvfuzz-mamba-trace/1"
NESTED, CLEAR_IN_GROUP, STRAY_END = "nested group begin", "clear in a group", "stray group end"
# Not a misuse: the group ops themselves, which a class without alloc groups (SGLang's MambaPool
# before 0.5.13) cannot take (`group_calls`).
GROUPS = "alloc groups"


@dataclass(frozen=True)
class Admit:
    """`alloc(1)` for a new request (inside a group: one of the pre-allocated slots)."""

    rid: int


@dataclass(frozen=True)
class AllocMany:
    """`alloc(count)` for a new holder; `relative`: count = available slots + `count`."""

    rid: int
    count: int
    relative: bool = False


@dataclass(frozen=True)
class Finish:
    """One `free` of the slots of every live request of `rids`, in order."""

    rids: tuple[int, ...]


@dataclass(frozen=True)
class GroupBegin:
    """`alloc_group_begin(count)` (`relative`: available slots + `count`)."""

    count: int
    relative: bool = False


@dataclass(frozen=True)
class GroupEnd:
    """`alloc_group_end()`: the group's unused pre-allocated slots go back."""


@dataclass(frozen=True)
class Clear:
    """`clear()`: every slot free, every request gone."""


@dataclass(frozen=True)
class FreeSlots:
    """`free(slots)` of these slots, in order: what a live guard sees (`kvfuzz.guard(allocator,
    "mamba")`: an engine frees slots, not requests). The generator does not write it."""

    slots: tuple[int, ...]


Op = Admit | AllocMany | Finish | GroupBegin | GroupEnd | Clear | FreeSlots
KINDS = {"admit": Admit, "alloc": AllocMany, "finish": Finish, "group_begin": GroupBegin,
         "group_end": GroupEnd, "clear": Clear, "free_slots": FreeSlots}
NAMES = {cls: name for name, cls in KINDS.items()}


@dataclass(frozen=True)
class Trace:
    """`MambaSlotAllocator(size, device)` driven by `ops`."""

    size: int
    ops: tuple[Op, ...]
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)

    def trace_id(self) -> str:
        return document_id(to_json(self))

    def describe(self) -> str:
        return f"{self.size} slots, {len(self.ops)} ops"


def protocol_misuse(trace: Trace) -> set[str]:
    """The group-protocol misuse in `trace` (NESTED, CLEAR_IN_GROUP, STRAY_END): exact without
    running it, since group ops always run."""
    found, open_ = set(), False
    for op in trace.ops:
        if isinstance(op, GroupBegin):
            found |= {NESTED} if open_ else set()
            open_ = True
        elif isinstance(op, GroupEnd):
            found |= set() if open_ else {STRAY_END}
            open_ = False
        elif isinstance(op, Clear):
            found |= {CLEAR_IN_GROUP} if open_ else set()
            open_ = False
    return found


def group_calls(trace: Trace) -> set[str]:
    """{GROUPS} where `trace` has a group op at all, else nothing."""
    return {GROUPS} if any(isinstance(op, (GroupBegin, GroupEnd)) for op in trace.ops) else set()


def describe_op(op: Op) -> str:
    if isinstance(op, Admit):
        return f"admit r{op.rid}"
    if isinstance(op, AllocMany):
        return f"alloc {'available' if op.relative else ''}{op.count:+d} slots for r{op.rid}" \
            if op.relative else f"alloc {op.count} slots for r{op.rid}"
    if isinstance(op, Finish):
        return "finish " + " ".join(f"r{r}" for r in op.rids)
    if isinstance(op, FreeSlots):
        shown = list(op.slots[:8])
        return f"free({len(op.slots)} slots {shown}{'...' if len(op.slots) > 8 else ''})"
    if isinstance(op, GroupBegin):
        return f"group begin {'available' if op.relative else ''}{op.count:+d}" \
            if op.relative else f"group begin {op.count}"
    return NAMES[type(op)].replace("_", " ")


def to_json(trace: Trace) -> dict:
    return {"format": FORMAT, "size": trace.size, "ops": [_op_to_json(op) for op in trace.ops],
            **provenance(trace)}


def _op_to_json(op: Op) -> dict:
    return dataclass_op_to_json(op, NAMES[type(op)])
