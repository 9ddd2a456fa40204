"""Decoding and validation of "kvfuzz-swa-trace/1" JSON; every problem raises `FormatError`
naming the source, the field and the value."""

from __future__ import annotations

from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.swa.scheduler_ops import MISUSES, RECLAIM_POOLS, TREES
from kvfuzz.strategies.swa.trace import (FORMAT, HOWS, KINDS, POOLS, Extend, ExtendSlots,
                                         FreeSegments, SetMapping, Trace)

_TOP = {"format", "page_size", "size", "size_swa", "need_sort", "debug", "strict", "ops",
        "origin", "note"}
_CHOICES = {"how": HOWS, "kind": MISUSES, "pool": RECLAIM_POOLS, "tree": TREES}
_BOOLEANS = {"checked", "prealloc"}
# Limits no legitimate trace reaches: they bound memory and the time one trace takes (each op
# compares state of the size of both pools and the mapping). Tokens x page size: upstream's
# set-shaped `free_swa` expands every slot it is given to its whole page, duplicates kept.
MAX_SIZE, MAX_PAGES, MAX_OPS, MAX_BATCH = 2**20, 2**14, 2**12, 2**10
MAX_EXPANSION = 2**22


def from_json(data: object, source: str = "trace") -> Trace:
    reader = FieldReader(source)
    reader.document(data, FORMAT, _TOP)
    page_size = reader.integer(data.get("page_size"), "page_size", low=1, high=2**10)
    sizes = {}
    for name in ("size", "size_swa"):
        sizes[name] = reader.integer(data.get(name), name, low=page_size, high=MAX_SIZE)
        reader.at_most(sizes[name] // page_size, name, MAX_PAGES, f"pages ({name} // page_size)")
        reader.at_most(sizes[name] * page_size, name, MAX_EXPANSION, f"{name} x page_size")
    need_sort = reader.boolean(data.get("need_sort"), "need_sort")
    checks = {name: reader.boolean(data[name], name) for name in ("debug", "strict")
              if name in data}  # absent: off (files from before they existed)
    ops = reader.ops(data.get("ops"), MAX_OPS)
    slots = sizes["size"] + page_size  # a full slot index is below it (the padding page)
    decoded = tuple(_op(reader, raw, f"ops[{i}]", slots) for i, raw in enumerate(ops))
    return Trace(page_size, sizes["size"], sizes["size_swa"], need_sort, decoded, **checks,
                 origin=reader.origin(data.get("origin")), note=reader.note(data.get("note")))


def _op(reader: FieldReader, raw: object, where: str, slots: int):
    kind = reader.op_kind(raw, where, KINDS)
    fields = kind.__dataclass_fields__
    values = {}
    for name, spec in fields.items():
        label = f"{where}.{name}"
        if name not in raw:
            if spec.default is spec.default_factory:  # no default: required
                reader.fail(label, "missing", None)
            continue
        value = raw[name]
        if name in _BY_SLOT_FIELDS:
            values[name] = _by_slot_field(reader, name, spec, value, label, slots)
        elif name in _CHOICES:
            values[name] = reader.choice(value, label, _CHOICES[name])
        elif name in _BOOLEANS:
            values[name] = reader.boolean(value, label)
        elif name == "delta":  # a demand relative to an available size: either sign
            values[name] = reader.integer(value, label, low=-MAX_SIZE, high=MAX_SIZE)
        elif name in ("size", "size_swa"):  # a resize's: beyond the built sizes resolves to
            values[name] = reader.integer(value, label, low=1, high=MAX_SIZE)  # nothing
        elif name in ("rids", "lens"):
            low, high = (1, MAX_SIZE) if name == "lens" else (0, 2**31)
            values[name] = tuple(reader.int_list(value, label, low=low, high=high,
                                                 most=MAX_BATCH))
        elif name == "len":  # 0: a transferred request with nothing to fill
            values[name] = reader.integer(value, label, low=0, high=MAX_SIZE)
        else:  # rid, keep, tail, salt
            values[name] = reader.integer(value, label, low=0, high=2**31)
    if kind is Extend and len(values["rids"]) != len(values["lens"]):
        reader.fail(f"{where}.lens", "must have one length per rid", list(values["lens"]))
    if kind is ExtendSlots and not len(values["prefix_lens"]) == len(values["seq_lens"]) == \
            len(values["last_loc"]):
        reader.fail(f"{where}.seq_lens", "must have one entry per prefix_lens and last_loc "
                    "entry", list(values["seq_lens"]))
    if kind is FreeSegments:
        if len(values["starts"]) != len(values["counts"]) or \
                sum(values["counts"]) != len(values["slots"]):
            reader.fail(f"{where}.counts", "must have one count per start, summing to the "
                        "slots' number", list(values["counts"]))
        if values.get("pools") == "swa" and len(values["starts"]) != 1:
            reader.fail(f"{where}.starts", "an SWA-only release is one segment",
                        list(values["starts"]))
    if kind is SetMapping and len(values["full"]) != len(values["swa"]):
        reader.fail(f"{where}.swa", "must have one SWA slot per full slot", list(values["swa"]))
    return kind(**values)


# The by-slot ops' fields (the calls a live guard records): lists of slots or lengths, and
# last_loc, where -1 is "no prefix". A slot list is at most `slots` (the full pool and its
# padding page) long: a set-shaped free expands each slot to its page, so this bounds the work
# of one op by the pool x page size, as for the request ops.
_BY_SLOT_FIELDS = {"need_size", "prefix_lens", "seq_lens", "last_loc", "prefix_len",
                   "seq_len", "slots", "starts", "counts", "pools", "full", "swa"}


def _by_slot_field(reader: FieldReader, name: str, spec, value, label: str, slots: int):
    if name == "pools":
        return reader.choice(value, label, POOLS)
    low = -1 if name == "last_loc" else 0
    if spec.type != "tuple[int, ...]":  # one request's value
        return reader.integer(value, label, low=low, high=MAX_SIZE)
    if name in ("slots", "full", "swa"):
        return reader.int_list(value, label, low=0, high=slots - 1, most=slots)
    if name in ("starts", "counts"):
        return reader.int_list(value, label, low=0, high=MAX_SIZE, most=slots)
    return reader.int_list(value, label, low=low, high=MAX_SIZE, most=MAX_BATCH)


def worst_input() -> dict:
    """The most a file under 1 MB can ask (replayed under a 1 GB bound by the memory test): a
    request filling both pools, its window evicted, then freed."""
    page, size = 64, 2**16
    return {"format": FORMAT, "page_size": page, "size": size, "size_swa": size,
            "need_sort": True, "ops": [
                {"op": "admit", "rid": 1}, {"op": "extend", "rids": [1], "lens": [size - page]},
                {"op": "evict", "rid": 1, "keep": 0}, {"op": "finish", "rid": 1}]}
