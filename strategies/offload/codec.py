"""Decoding and validation of "kvfuzz-offload-trace/1" JSON; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from collections import Counter

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.offload.trace import FORMAT, KINDS, POLICIES, RANGES, New, Op, Trace

# Limits no legitimate trace reaches: they bound memory and the time one trace takes (every op
# reads the whole cache and probes every stored key, so chunks x ops is what a trace costs).
MAX_CHUNKS, MAX_OPS, MAX_HASHES, MAX_ID = 2**8, 2**11, 2**10, 2**31
MAX_HASH = 2**63 - 1     # a hash travels as 8 bytes
MAX_GROUPS = 4           # a model has a handful of KV-cache groups
MAX_THRESHOLD, MAX_TRACKER = 8, 2**16
FIELDS = {"format", "policy", "chunks", "groups", "events", "store_threshold", "tracker_size",
          "ops", "origin", "note"}


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, FIELDS)
    policy = reader.choice(data.get("policy"), "policy", POLICIES)
    chunks = reader.integer(data.get("chunks"), "chunks", low=0, high=MAX_CHUNKS)
    groups = reader.integer(data.get("groups"), "groups", low=1, high=MAX_GROUPS)
    events = reader.boolean(data.get("events"), "events")
    threshold = reader.integer(data.get("store_threshold"), "store_threshold", low=1,
                               high=MAX_THRESHOLD)
    tracker = reader.integer(data.get("tracker_size"), "tracker_size", low=1, high=MAX_TRACKER)
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
    return Trace(policy, chunks, groups, events, threshold, tracker, decoded,
                 reader.origin(data.get("origin")), reader.note(data.get("note")))


def _op(reader: FieldReader, raw: object, where: str) -> Op:
    kind = reader.op_kind(raw, where, KINDS)
    values = {}
    for name, at, value in reader.op_fields(raw, kind, where):
        if name in ("positioned", "success"):
            values[name] = reader.boolean(value, at)
        elif name == "hashes":
            values[name] = reader.int_list(value, at, low=0, high=MAX_HASH, most=MAX_HASHES)
        elif name == "rid":
            values[name] = reader.integer(value, at, low=0, high=MAX_ID)
        else:  # start, stop
            values[name] = reader.integer(value, at, low=0, high=MAX_HASHES)
    if kind is New:
        hashes = values["hashes"]
        twice = next((h for h, n in Counter(hashes).items() if n > 1), None)
        reader.expect(twice is None, f"{where}.hashes", f"a request's chunk hashes must be "
                      f"distinct (a chain of hashes), {twice} is there twice", list(hashes))
    if kind in RANGES:
        reader.expect(values["start"] <= values["stop"], f"{where}.stop",
                      f"must not be below start ({values['start']})", values["stop"])
    return kind(**values)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test):
    a pool of MAX_CHUNKS chunks filled by one request, then every op storing a chunk's worth of
    new keys, each evicting, so every op reads and probes a full cache."""
    filled = list(range(1, MAX_CHUNKS + 1))
    ops = [{"op": "new", "rid": 1, "hashes": filled},
           {"op": "store", "rid": 1, "start": 0, "stop": MAX_CHUNKS},
           {"op": "complete_store", "rid": 1}]
    for rid in range(2, (MAX_OPS - 3) // 3 + 2):
        ops += [{"op": "new", "rid": rid, "hashes": [MAX_CHUNKS + rid]},
                {"op": "store", "rid": rid, "start": 0, "stop": 1},
                {"op": "complete_store", "rid": rid}]
    return {"format": FORMAT, "policy": "arc", "chunks": MAX_CHUNKS, "groups": 1,
            "events": True, "store_threshold": 1, "tracker_size": MAX_TRACKER, "ops": ops}
