"""Decoding and validation of "kvfuzz-compaction-trace/1" JSON; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from kvfuzz.strategies.compaction.trace import (FORMAT, HELD, KINDS, WHERE, WHICH, Alloc, Clear,
                                                Fire, Forward, Op, Params, Pick, Release,
                                                Reserve, Trace)
from kvfuzz.strategies.inputs import FieldReader

_INT_PARAMS = ("total_bytes", "epp_up", "epp_down", "sink_bytes", "move_cap")
# Limits no legitimate trace reaches: they bound memory (the byte buffer, two tables per pool) and
# the time one trace takes (each op compares and checks every page of both pools).
MAX_BYTES, MAX_PAGES, MAX_OPS, MAX_N = 2**22, 2**12, 2**12, 2**12
MAX_PAGE_SIZE = 64  # tokens per page: the adapter's byte buffer grows with it


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, {"format", "params", "ops", "origin", "note"})
    params = _params(reader, data.get("params"))
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(_op(reader, raw, f"ops[{i}]", params) for i, raw in enumerate(ops))
    return Trace(params, decoded, reader.origin(data.get("origin")),
                 reader.note(data.get("note")))



def _params(reader: FieldReader, raw: object) -> Params:
    reader.expect(isinstance(raw, dict), "params", "expected an object", raw)
    reader.known_fields(raw, set(vars(Params())), "params.")
    for name in _INT_PARAMS:  # every parameter is required: none defaults silently
        reader.integer(raw.get(name), f"params.{name}", low=1, high=MAX_BYTES)
    reader.boolean(raw.get("two_ended"), "params.two_ended")
    if "page_size" in raw:  # optional: a trace without it has pages of one token
        reader.integer(raw["page_size"], "params.page_size", low=1, high=MAX_PAGE_SIZE)
        # A buffer of tokens no larger than MAX_BYTES at page size 1: memory stays bounded.
        reader.at_most(raw["total_bytes"] * raw["page_size"], "params.page_size", MAX_BYTES,
                       "bytes x page_size")
    params = Params(**raw)
    reader.expect(params.sink_bytes >= max(params.epp_up, params.epp_down), "params.sink_bytes",
                  "must be at least max(epp_up, epp_down)", params.sink_bytes)
    for pool, epp in (("up", params.epp_up), ("down", params.epp_down)):
        reserved = -(-params.sink_bytes // epp)
        reader.expect(params.total_bytes // epp > reserved, f"params.epp_{pool}",
                      "leaves no page above the sink", epp)
        reader.at_most(params.total_bytes // epp, f"params.epp_{pool}", MAX_PAGES,
                       "pages (total_bytes // epp)")
    return params


def _op(reader: FieldReader, raw: object, where: str, params: Params) -> Op:
    kind = reader.op_kind(raw, where, KINDS)
    names = set(kind.__dataclass_fields__)
    fields = {name: raw[name] for name in raw if name != "op"}
    if "pool" in names and not (kind is Clear and fields.get("pool") is None):  # None: all
        reader.choice(fields.get("pool"), f"{where}.pool", params.pools())
    for name in ("urgent", "relative"):
        if name in names:
            fields[name] = reader.boolean(fields.get(name, False), f"{where}.{name}")
    if kind in (Alloc, Reserve):
        low = -MAX_N if fields["relative"] else 1
        reader.integer(fields.get("n"), f"{where}.n", low, MAX_N)
    if kind is Fire:
        reader.choice(fields.get("which", "oldest"), f"{where}.which", WHICH)
    if kind is Release:
        reader.choice(fields.get("which", "oldest"), f"{where}.which", HELD)
    for name in ("pick", "up", "down"):
        if name in fields and (name == "pick" or fields[name] is not None):
            fields[name] = _pick(reader, fields[name], f"{where}.{name}")
    if kind is Forward and not params.two_ended:
        reader.expect(fields.get("down") is None, f"{where}.down", "single-ended trace",
                      fields.get("down"))
    if "pick" in names and "pick" not in fields:
        reader.fail(f"{where}.pick", "missing", None)
    return kind(**fields)


def _pick(reader: FieldReader, raw: object, where: str) -> Pick:
    reader.expect(isinstance(raw, dict) and set(raw) <= {"where", "n", "salt"}, where,
                  "expected {where, n, salt}", raw)
    reader.choice(raw.get("where", "top"), f"{where}.where", WHERE)
    reader.integer(raw.get("n", 1), f"{where}.n", 1, MAX_N)
    reader.integer(raw.get("salt", 0), f"{where}.salt")
    return Pick(**raw)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test): a
    MAX_BYTES buffer of MAX_PAGES pages per pool, nearly filled from both ends, then one urgent
    flush moving 2,000 pages."""
    epp = MAX_BYTES // MAX_PAGES
    return {"format": FORMAT, "params": {
        "total_bytes": MAX_BYTES, "epp_up": epp, "epp_down": epp, "sink_bytes": epp,
        "two_ended": True, "move_cap": 4096}, "ops": [
            {"op": "alloc", "pool": "up", "n": 2040}, {"op": "alloc", "pool": "down", "n": 2040},
            {"op": "free", "pool": "up", "pick": {"where": "bottom", "n": 2000}},
            {"op": "flush", "pool": "up", "urgent": True}]}
