"""Decoding and validation of "kvfuzz-radix-trace/1" JSON; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from dataclasses import MISSING, fields

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.radix.trace import FORMAT, KINDS, POLICIES, Admit, Op, Trace

# Limits no legitimate trace reaches: they bound memory and the time one trace takes (every op
# reads the whole tree, so the tokens held x ops is what a trace costs).
MAX_SIZE, MAX_PAGE, MAX_OPS, MAX_TOKENS = 2**11, 64, 2**10, 2**10
MAX_ID, MAX_NS, MAX_PRIORITY = 2**31, 3, 2**20
MAX_WINDOW = MAX_SIZE


# What every radix-format document may hold (the unified format's too), and a pure-SWA trace's
BASE_FIELDS = {"format", "page_size", "size", "policy", "events", "ops", "origin", "note"}
FIELDS = BASE_FIELDS | {"swa_window", "prefill_aware"}


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, FIELDS)
    fields_read = read_fields(reader, data)
    return Trace(**fields_read, **_window(reader, data, fields_read["page_size"]))


def _window(reader: FieldReader, data: dict, page: int) -> dict:
    """A pure-SWA trace's window and floor (absent: none). SGLang's pure-SWA allocator
    (`PureSWATokenToKVPoolAllocator`) asserts page size 1, so a window needs it."""
    window = reader.integer(data.get("swa_window", 0), "swa_window", low=0, high=MAX_WINDOW)
    aware = reader.boolean(data.get("prefill_aware", False), "prefill_aware")
    reader.expect(not window or page == 1, "swa_window",
                  f"needs page_size 1 (SGLang's pure-SWA allocator has no pages), not {page}",
                  window)
    reader.expect(window or not aware, "prefill_aware", "needs a swa_window", aware)
    return dict(swa_window=window, prefill_aware=aware)


def read_fields(reader: FieldReader, data: dict) -> dict:
    """The fields of a trace in this format, decoded (a format that extends this one, as
    "kvfuzz-unified-trace/1" does, reads them here and its own after)."""
    page = reader.integer(data.get("page_size"), "page_size", low=1, high=MAX_PAGE)
    reader.expect(page & (page - 1) == 0, "page_size", "expected a power of 2", page)
    size = reader.integer(data.get("size"), "size", low=page, high=MAX_SIZE)
    reader.expect(size % page == 0, "size", f"expected a multiple of the page size {page}", size)
    policy = reader.choice(data.get("policy"), "policy", POLICIES)
    events = reader.boolean(data.get("events"), "events")
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
    return dict(page_size=page, size=size, policy=policy, events=events, ops=decoded,
                origin=reader.origin(data.get("origin")), note=reader.note(data.get("note")))


def _op(reader: FieldReader, raw: object, where: str) -> Op:
    kind = reader.op_kind(raw, where, KINDS)
    values = {}
    for f in fields(kind):
        name, at = f.name, f"{where}.{f.name}"
        value = raw.get(name, None if f.default is MISSING else f.default)
        if name in ("cache", "relative"):
            values[name] = reader.boolean(value, at)
        elif name == "tokens":
            values[name] = reader.int_list(value, at, low=0, high=MAX_ID, most=MAX_TOKENS)
        elif name == "ns":
            values[name] = reader.integer(value, at, low=0, high=MAX_NS)
        elif name == "priority":
            values[name] = reader.integer(value, at, low=-MAX_PRIORITY, high=MAX_PRIORITY)
        elif name == "count":
            relative = values.get("relative", raw.get("relative") is True)
            values[name] = reader.integer(value, at, low=-MAX_SIZE if relative else 0,
                                          high=MAX_SIZE)
        elif name == "prompt":
            values[name] = reader.integer(value, at, low=1, high=MAX_TOKENS)
        else:  # rid
            values[name] = reader.integer(value, at, low=0, high=MAX_ID)
    if kind is Admit:
        reader.expect(values["prompt"] <= len(values["tokens"]), f"{where}.prompt",
                      f"must not exceed the request's tokens ({len(values['tokens'])})",
                      values["prompt"])
    return kind(**values)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test): the
    whole pool filled by cached requests of MAX_TOKENS tokens, then every op left a short probe
    (each op reads the whole tree)."""
    tokens = list(range(MAX_TOKENS))
    admits = [op for rid in range(1, MAX_SIZE // MAX_TOKENS + 1) for op in (
        {"op": "admit", "rid": rid, "tokens": [rid] + tokens[1:], "prompt": MAX_TOKENS},
        {"op": "extend", "rid": rid, "count": MAX_TOKENS},
        {"op": "finish", "rid": rid})]
    probes = [{"op": "match", "tokens": [1 + i % 16, 1]}
              for i in range(MAX_OPS - len(admits))]
    return {"format": FORMAT, "page_size": 1, "size": MAX_SIZE, "policy": "lru", "events": True,
            "ops": admits + probes}
