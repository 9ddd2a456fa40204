"""Decoding and validation of "kvfuzz-allocator-trace/1" JSON; every problem raises
`CaseFormatError` naming the source, the field and the value."""

from __future__ import annotations

from kvfuzz.strategies.allocator.trace import (FORMAT, FREE_HOWS, KINDS, MISUSES, AllocPages, Extend,
                                        Finish, Misuse, Trace, Truncate)
from kvfuzz.strategies.paged.case import INT64_MAX, CaseFormatError, Origin

_TOP = {"format", "page_size", "size", "need_sort", "debug", "ops", "origin"}
_CHOICES = {(Finish, "how"): FREE_HOWS, (Truncate, "how"): FREE_HOWS, (Misuse, "kind"): MISUSES}
_NATURAL = {"rid", "share_pages", "keep", "trim", "salt"}  # integers >= 0


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, name: str, problem: str, value: object):
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise CaseFormatError(f"{self.source}: field '{name}': {problem}, got {shown}")

    def integer(self, value: object, name: str, low: int = -INT64_MAX - 1,
                high: int = INT64_MAX) -> int:
        if type(value) is not int or not low <= value <= high:
            self.fail(name, f"expected an integer in [{low}, {high}]", value)
        return value

    def boolean(self, value: object, name: str) -> bool:
        if type(value) is not bool:
            self.fail(name, "expected true or false", value)
        return value


def decode_trace(data: object, source: str) -> Trace:
    reader = _Reader(source)
    if not isinstance(data, dict):
        reader.fail("(top level)", "expected a JSON object", type(data).__name__)
    if data.get("format") != FORMAT:
        reader.fail("format", f"expected {FORMAT!r}", data.get("format"))
    unknown = sorted(set(data) - _TOP)
    if unknown:
        reader.fail(unknown[0], "unknown field", data[unknown[0]])
    page_size = reader.integer(data.get("page_size"), "page_size", low=1, high=2**20)
    size = reader.integer(data.get("size"), "size", low=page_size, high=2**24)
    need_sort = reader.boolean(data.get("need_sort"), "need_sort")
    debug = reader.boolean(data.get("debug", False), "debug")
    ops = data.get("ops")
    if not isinstance(ops, list):
        reader.fail("ops", "expected a list of operations", ops)
    decoded = tuple(_op(reader, raw, f"ops[{i}]") for i, raw in enumerate(ops))
    return Trace(page_size, size, need_sort, decoded, debug, _origin(reader, data.get("origin")))


def _op(reader: _Reader, raw: object, where: str):
    if not isinstance(raw, dict):
        reader.fail(where, "expected an object", raw)
    kind = KINDS.get(raw.get("op"))
    if kind is None:
        reader.fail(f"{where}.op", f"expected one of {', '.join(KINDS)}", raw.get("op"))
    names = set(kind.__dataclass_fields__)
    extra = sorted(set(raw) - names - {"op"})
    if extra:
        reader.fail(f"{where}.{extra[0]}", f"unknown field for {raw['op']}", raw[extra[0]])
    values = {}
    for name in names & set(raw):
        values[name] = _value(reader, kind, name, raw[name], f"{where}.{name}")
    missing = [n for n, f in kind.__dataclass_fields__.items()
               if n not in values and f.default is f.default_factory]  # no default: required
    if missing:
        reader.fail(f"{where}.{missing[0]}", "missing", None)
    if kind is AllocPages and not values.get("relative", False) and values.get("pages", 0) < 0:
        reader.fail(f"{where}.pages", "expected >= 0 unless relative", values["pages"])
    if kind is Extend and len(values.get("rids", ())) != len(values.get("lens", ())):
        reader.fail(f"{where}.lens", "must have one length per rid", values.get("lens"))
    return kind(**values)


def _value(reader: _Reader, kind, name: str, value: object, label: str):
    if (kind, name) in _CHOICES:
        if value not in _CHOICES[kind, name]:
            reader.fail(label, f"expected one of {', '.join(_CHOICES[kind, name])}", value)
        return value
    if name in ("need_sort", "exact", "relative"):
        return reader.boolean(value, label)
    if name in ("rids", "lens"):
        if not isinstance(value, list):
            reader.fail(label, "expected a list of integers", value)
        return tuple(reader.integer(v, f"{label}[{i}]", low=0, high=2**31)
                     for i, v in enumerate(value))
    if name in ("share_from", "fill") and value is None:
        return None
    if name in _NATURAL or name == "share_from":
        return reader.integer(value, label, low=0, high=2**31)
    return reader.integer(value, label, low=-2**31, high=2**31)  # fill, pages (relative: < 0)


def _origin(reader: _Reader, value: object) -> Origin | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"generator", "seed", "index"}:
        reader.fail("origin", "expected {generator, seed, index}", value)
    return Origin(str(value["generator"]), reader.integer(value["seed"], "origin.seed"),
                  reader.integer(value["index"], "origin.index"))
