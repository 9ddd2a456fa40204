"""Decoding and validation of "kvfuzz-allocator-trace/1" JSON; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from kvfuzz.strategies.allocator.trace import (ALL_MISUSES, FORMAT, FREE_HOWS, INTERFACES,
                                               KINDS, AllocPages, DecodeSlots, Extend,
                                               ExtendSlots, Finish, FreeSegments, Misuse, Trace,
                                               Truncate)
from kvfuzz.strategies.inputs import FieldReader

_TOP = {"format", "page_size", "size", "need_sort", "debug", "interface", "ops", "origin", "note"}
_CHOICES = {(Finish, "how"): FREE_HOWS, (Truncate, "how"): FREE_HOWS,
            (Misuse, "kind"): ALL_MISUSES}
_NATURAL = {"rid", "share_pages", "keep", "trim", "salt"}  # integers >= 0
# Limits no legitimate trace reaches: they bound memory and the time one trace takes (each op
# compares state of the size of the pool).
MAX_SIZE, MAX_PAGES, MAX_OPS, MAX_BATCH = 2**20, 2**14, 2**12, 2**10


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, _TOP)
    page_size = reader.integer(data.get("page_size"), "page_size", low=1, high=MAX_SIZE)
    size = reader.integer(data.get("size"), "size", low=page_size, high=MAX_SIZE)
    reader.at_most(size // page_size, "size", MAX_PAGES, "pages (size // page_size)")
    need_sort = reader.boolean(data.get("need_sort"), "need_sort")
    debug = reader.boolean(data.get("debug"), "debug")
    interface = reader.choice(data.get("interface", "paged"), "interface", INTERFACES)
    if interface == "token" and page_size != 1:
        reader.fail("page_size", "expected 1 for the token interface", page_size)
    ops = reader.ops(data.get("ops"), MAX_OPS)
    decoded = tuple(_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
    return Trace(page_size, size, need_sort, decoded, debug, interface,
                 reader.origin(data.get("origin")), reader.note(data.get("note")))


def _op(reader: FieldReader, raw: object, where: str):
    kind = reader.op_kind(raw, where, KINDS)
    names = set(kind.__dataclass_fields__)
    values = {name: _value(reader, kind, name, raw[name], f"{where}.{name}")
              for name in names & set(raw)}
    missing = [n for n, f in kind.__dataclass_fields__.items()
               if n not in values and f.default is f.default_factory]  # no default: required
    if missing:
        reader.fail(f"{where}.{missing[0]}", "missing", None)
    if kind is AllocPages and not values.get("relative", False) and values.get("pages", 0) < 0:
        reader.fail(f"{where}.pages", "expected >= 0 unless relative", values["pages"])
    if kind is Extend and len(values.get("rids", ())) != len(values.get("lens", ())):
        reader.fail(f"{where}.lens", "must have one length per rid", values.get("lens"))
    # A by-slot batch: one entry per request in each list; segments: one count per start.
    for first, *others in _SAME_LENGTH.get(kind, ()):
        for other in others:
            if len(values[other]) != len(values[first]):
                reader.fail(f"{where}.{other}", f"must have one entry per {first} entry "
                                                f"({len(values[first])})", values[other])
    if kind is FreeSegments and sum(values["counts"]) != len(values["slots"]):
        reader.fail(f"{where}.counts", f"must add up to the slots ({len(values['slots'])})",
                    values["counts"])
    return kind(**values)


_SAME_LENGTH = {ExtendSlots: [("prefix_lens", "seq_lens", "last_loc")],
                DecodeSlots: [("seq_lens", "last_loc")], FreeSegments: [("starts", "counts")]}
# list field -> the most entries: a batch, a call's segments, a call's slots or pages
_LISTS = {"prefix_lens": MAX_BATCH, "seq_lens": MAX_BATCH, "starts": MAX_PAGES,
          "counts": MAX_PAGES, "slots": MAX_SIZE, "page_ids": MAX_PAGES}


def _value(reader: FieldReader, kind, name: str, value: object, label: str):
    if (kind, name) in _CHOICES:
        return reader.choice(value, label, _CHOICES[kind, name])
    if name in ("need_sort", "exact", "relative"):
        return reader.boolean(value, label)
    if name in ("rids", "lens"):
        high = MAX_SIZE if name == "lens" else 2**31  # no request holds more than the pool
        return reader.int_list(value, label, low=0, high=high, most=MAX_BATCH)
    if name in _LISTS:
        return reader.int_list(value, label, low=0, high=MAX_SIZE, most=_LISTS[name])
    if name == "last_loc":  # -1: a request with nothing stored yet
        return reader.int_list(value, label, low=-1, high=MAX_SIZE, most=MAX_BATCH)
    if name == "need_size":
        return reader.integer(value, label, low=0, high=MAX_SIZE)
    if name in ("share_from", "fill", "num_new_pages") and value is None:
        return None
    if name == "num_new_pages":
        return reader.integer(value, label, low=0, high=MAX_PAGES)
    if name in _NATURAL or name == "share_from":
        return reader.integer(value, label, low=0, high=2**31)
    return reader.integer(value, label, -MAX_SIZE, MAX_SIZE)  # fill, pages (relative: < 0)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test): a
    request filling a MAX_SIZE pool, decoding, then freed."""
    page = 64
    return {"format": FORMAT, "page_size": page, "size": MAX_SIZE, "need_sort": True,
            "debug": True, "ops": [{"op": "admit", "rid": 1},
                                   {"op": "extend", "rids": [1], "lens": [MAX_SIZE - page]},
                                   *[{"op": "decode", "rids": [1]}] * page,
                                   {"op": "finish", "rid": 1}]}
