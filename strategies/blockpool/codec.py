"""Decoding and validation of "kvfuzz-blockpool-trace/1" JSON; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from dataclasses import MISSING, fields

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.blockpool.trace import FORMAT, KINDS, SETTINGS, CacheIds, Op, Trace

# Limits no legitimate trace reaches: they bound memory and the time one trace takes (each op
# compares the state of every block, so blocks x ops is what a trace costs).
MAX_BLOCKS, MAX_OPS, MAX_LIST, MAX_ID = 2**11, 2**11, 2**10, 2**31
MAX_GROUP = 7  # vLLM packs the group id in 4 bytes; a model has a handful of groups
# A hash block of 256 tokens and blocks of 16 of them: beyond any model's cache block (a KV
# event carries a block's tokens, so this bounds what one event holds).
MAX_HASH_BLOCK, MAX_SCALE, MAX_LOOKAHEAD = 256, 16, 16
MAX_IMAGES, MAX_LEN = 64, 2**20  # multimodal inputs of a request, and their token offsets


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, {"format", "blocks", "caching", "ops", "origin", "note",
                                   *SETTINGS})
    blocks = reader.integer(data.get("blocks"), "blocks", low=1, high=MAX_BLOCKS)
    caching = reader.boolean(data.get("caching"), "caching")
    settings = {
        "hash_block_size": reader.integer(data.get("hash_block_size", 16), "hash_block_size",
                                          low=1, high=MAX_HASH_BLOCK),
        "scale": reader.integer(data.get("scale", 1), "scale", low=1, high=MAX_SCALE),
        "lookahead": reader.integer(data.get("lookahead", 0), "lookahead", low=0,
                                    high=MAX_LOOKAHEAD),
        "images": _images(reader, data.get("images", [])),
        **{name: reader.boolean(data.get(name, False), name)
           for name in ("events", "salt", "report", "metrics")}}
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
    return Trace(blocks, caching, decoded, **settings, origin=reader.origin(data.get("origin")),
                 note=reader.note(data.get("note")))


def _images(reader: FieldReader, value: object) -> tuple[tuple[int, int], ...]:
    """[[offset, length], ...]: in token order, apart, each at least one token."""
    reader.expect(isinstance(value, list) and len(value) <= MAX_IMAGES, "images",
                  f"expected a list of at most {MAX_IMAGES} [offset, length] pairs", value)
    images, end = [], 0
    for i, pair in enumerate(value):
        at = f"images[{i}]"
        pair = reader.int_list(pair, at, low=0, high=MAX_LEN, most=2)
        reader.expect(len(pair) == 2 and pair[1] >= 1 and pair[0] >= end, at,
                      "expected [offset, length], length 1 or more, after the one before", pair)
        images.append((pair[0], pair[1]))
        end = pair[0] + pair[1]
    return tuple(images)


def _op(reader: FieldReader, raw: object, where: str) -> Op:
    kind = reader.op_kind(raw, where, KINDS)
    values = {}
    for f in fields(kind):
        name, at = f.name, f"{where}.{f.name}"
        value = raw.get(name, None if f.default is MISSING else f.default)
        value = list(value) if isinstance(value, tuple) else value  # a default of ()
        if name in ("relative", "reverse", "replace"):
            values[name] = reader.boolean(value, at)
        elif name in ("units", "index"):
            values[name] = reader.integer(value, at, low=0, high=MAX_LIST)
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
        else:  # rid, src, dst, first
            values[name] = reader.integer(value, at, low=0, high=MAX_ID)
    if kind is CacheIds:
        reader.expect(len(values["hashes"]) == len(values["block_ids"]), f"{where}.hashes",
                      f"must hold one hash per block ({len(values['block_ids'])})",
                      len(values["hashes"]))
    return kind(**values)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test):
    every op reads the whole pool, so MAX_BLOCKS blocks and MAX_OPS ops, probing for hashes;
    the cache call publishes a KV event of MAX_LIST blocks of the largest hash block."""
    return {"format": FORMAT, "blocks": MAX_BLOCKS, "caching": True, "events": True,
            "hash_block_size": MAX_HASH_BLOCK, "lookahead": MAX_LOOKAHEAD, "ops": [
        {"op": "alloc", "rid": 1, "count": MAX_BLOCKS - 1},
        {"op": "cache", "rid": 1, "hashes": list(range(1, MAX_LIST + 1))},
        {"op": "free", "rids": [1]},
        *[{"op": "probe", "hashes": list(range(1, 41)), "groups": [0] * 8}] * (MAX_OPS - 3)]}
