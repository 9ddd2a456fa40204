"""Decoding and validation of "kvfuzz-blockpool-trace/1" JSON; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from dataclasses import MISSING, fields

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.blockpool.trace import FORMAT, KINDS, CacheIds, Op, Trace

# Limits no legitimate trace reaches: they bound memory and the time one trace takes (each op
# compares the state of every block, so blocks x ops is what a trace costs).
MAX_BLOCKS, MAX_OPS, MAX_LIST, MAX_ID = 2**11, 2**11, 2**10, 2**31
MAX_GROUP = 7  # vLLM packs the group id in 4 bytes; a model has a handful of groups


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, {"format", "blocks", "caching", "ops", "origin", "note"})
    blocks = reader.integer(data.get("blocks"), "blocks", low=1, high=MAX_BLOCKS)
    caching = reader.boolean(data.get("caching"), "caching")
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
    return Trace(blocks, caching, decoded, reader.origin(data.get("origin")),
                 reader.note(data.get("note")))


def _op(reader: FieldReader, raw: object, where: str) -> Op:
    kind = reader.op_kind(raw, where, KINDS)
    values = {}
    for f in fields(kind):
        name, at = f.name, f"{where}.{f.name}"
        value = raw.get(name, None if f.default is MISSING else f.default)
        if name == "relative" or name == "reverse":
            values[name] = reader.boolean(value, at)
        elif name == "count":
            relative = values.get("relative", raw.get("relative") is True)
            values[name] = reader.integer(value, at, low=-MAX_BLOCKS if relative else 0,
                                          high=MAX_BLOCKS)
        elif name == "group":
            values[name] = reader.integer(value, at, low=0, high=MAX_GROUP)
        elif name == "groups":
            values[name] = reader.int_list(list(value) if isinstance(value, tuple) else value,
                                           at, low=0, high=MAX_GROUP, most=MAX_GROUP + 1)
        elif name in ("hashes", "rids", "block_ids"):
            values[name] = reader.int_list(value, at, low=0, high=MAX_ID, most=MAX_LIST)
        elif name == "skip":
            values[name] = reader.int_list(value, at, low=0, high=MAX_LIST - 1, most=MAX_LIST)
        else:  # rid, src
            values[name] = reader.integer(value, at, low=0, high=MAX_ID)
    if kind is CacheIds:
        reader.expect(len(values["hashes"]) == len(values["block_ids"]), f"{where}.hashes",
                      f"must hold one hash per block ({len(values['block_ids'])})",
                      len(values["hashes"]))
    return kind(**values)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test):
    every op reads the whole pool, so MAX_BLOCKS blocks and MAX_OPS ops, probing for hashes."""
    return {"format": FORMAT, "blocks": MAX_BLOCKS, "caching": True, "ops": [
        {"op": "alloc", "rid": 1, "count": MAX_BLOCKS - 1},
        {"op": "cache", "rid": 1, "hashes": list(range(1, MAX_LIST + 1))},
        {"op": "free", "rids": [1]},
        *[{"op": "probe", "hashes": list(range(1, 41)), "groups": [0] * 8}] * (MAX_OPS - 3)]}
