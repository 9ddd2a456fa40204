"""Decoding and validation of "kvfuzz-mamba-trace/1" JSON; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.mamba.trace import (FORMAT, KINDS, AllocMany, Finish, FreeSlots, GroupBegin,
                                           Op, Trace)

# Limits no legitimate trace reaches: they bound memory and the time one trace takes (each op
# compares state of the size of the pool).
MAX_SIZE, MAX_OPS, MAX_BATCH = 2**16, 2**12, 2**10


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, {"format", "size", "ops", "origin", "note"})
    size = reader.integer(data.get("size"), "size", low=1, high=MAX_SIZE)
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
    return Trace(size, decoded, reader.origin(data.get("origin")), reader.note(data.get("note")))


def _op(reader: FieldReader, raw: object, where: str) -> Op:
    kind = reader.op_kind(raw, where, KINDS)
    names = set(kind.__dataclass_fields__)
    values = {}
    if "rid" in names:
        values["rid"] = reader.integer(raw.get("rid"), f"{where}.rid", low=0, high=2**31)
    if kind is Finish:
        values["rids"] = tuple(reader.int_list(raw.get("rids"), f"{where}.rids", low=0,
                                               high=2**31, most=MAX_BATCH))
    if kind is FreeSlots:
        values["slots"] = tuple(reader.int_list(raw.get("slots"), f"{where}.slots", low=0,
                                                high=MAX_SIZE, most=MAX_SIZE))
    if kind in (AllocMany, GroupBegin):
        relative = reader.boolean(raw.get("relative", False), f"{where}.relative")
        values["relative"] = relative
        values["count"] = reader.integer(raw.get("count"), f"{where}.count",
                                         low=-MAX_SIZE if relative else 0, high=MAX_SIZE)
    return kind(**values)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test):
    every slot of a MAX_SIZE pool handed out, freed, then pre-allocated by a group."""
    return {"format": FORMAT, "size": MAX_SIZE, "ops": [
        {"op": "alloc", "rid": 1, "count": MAX_SIZE}, {"op": "finish", "rids": [1]},
        {"op": "group_begin", "count": MAX_SIZE}, {"op": "group_end"}]}
