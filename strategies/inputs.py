"""What every target's input shares: its provenance (`Origin`), its content id, and the one JSON
field reader, whose every error names the source, the field and the value. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, dataclass, fields

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


class FormatError(ValueError):
    """An input file or dict is malformed; the message names the source, the field and the value."""


@dataclass(frozen=True)
class Origin:
    """Where a generated input came from: input `index` of `seed` of a versioned `generator`."""

    generator: str
    seed: int
    index: int

    def describe(self) -> str:
        return f"generator {self.generator}, seed {self.seed}, index {self.index}"

    def to_json(self) -> dict:
        return {"generator": self.generator, "seed": self.seed, "index": self.index}


def provenance(item) -> dict:
    """The provenance fields of an input's JSON document: `origin` and `note`, where set."""
    data = {"origin": item.origin.to_json()} if item.origin is not None else {}
    return {**data, "note": item.note} if item.note else data


def content_id(content: dict) -> str:
    """A short hash of canonical JSON: stable across runs, machines and provenance (callers leave
    `origin` and `note` out). Names corpus files, so the same input found twice is one file."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def document_id(document: dict) -> str:
    """`content_id` of an input's JSON document without its provenance (`origin`, `note`)."""
    return content_id({k: v for k, v in document.items() if k not in ("origin", "note")})


# An op field added after its format was first written (`field(default=..., metadata=LATER)`):
# left out of the JSON at its default, so an op without it keeps its content id (corpus file
# names derive from content) and reads as before.
LATER = {"later": True}


def dataclass_op_to_json(op, name: str) -> dict:
    """A trace op (a dataclass of ints, bools and tuples) as `{"op": name, field: value...}`."""
    data = {"op": name}
    for f in fields(op):
        value = getattr(op, f.name)
        if f.metadata.get("later") and value == f.default:
            continue
        data[f.name] = _listed(value)
    return data


def _listed(value):
    """Tuples as lists, nested ones too (an arrival's images): what JSON gives back, so that a
    decoder reading lists takes the encoder's output as it is, not only after a dump and load."""
    return [_listed(item) for item in value] if isinstance(value, tuple) else value



def ceil_pages(num_tokens: int, page_size: int) -> int:
    return (num_tokens + page_size - 1) // page_size


def parse_json(text: str, source: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:  # also a 4300+ digit number, deep nesting
        raise FormatError(f"{source}: not valid JSON: {error}") from None


class FieldReader:
    """Reads and checks the fields of one decoded JSON document; the first problem raises
    `FormatError("<source>: field '<field>': <problem>, got <value>")`."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, field: str, problem: str, value: object):
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise FormatError(f"{self.source}: field '{field}': {problem}, got {shown}")

    def expect(self, ok: bool, field: str, problem: str, value: object) -> None:
        if not ok:
            self.fail(field, problem, value)

    def document(self, data: object, expected_format: str, allowed: set[str]) -> dict:
        """The top level: an object of `expected_format` with no field outside `allowed`."""
        self.expect(isinstance(data, dict), "(top level)", "expected a JSON object",
                    type(data).__name__)
        self.expect(data.get("format") == expected_format, "format",
                    f"expected {expected_format!r}", data.get("format"))
        self.known_fields(data, allowed, "")
        return data

    def known_fields(self, data: dict, allowed: set[str], where: str) -> None:
        unknown = sorted(set(data) - allowed)
        if unknown:
            self.fail(f"{where}{unknown[0]}", "unknown field", data[unknown[0]])

    def integer(self, value: object, field: str, low: int = INT64_MIN,
                high: int = INT64_MAX) -> int:
        self.expect(type(value) is int and low <= value <= high, field,
                    f"expected an integer in [{low}, {high}]", value)
        return value

    def boolean(self, value: object, field: str) -> bool:
        self.expect(type(value) is bool, field, "expected true or false", value)
        return value

    def choice(self, value: object, field: str, options) -> object:
        self.expect(value in options, field, f"expected one of {', '.join(options)}", value)
        return value

    def int_list(self, value: object, field: str, low: int = INT64_MIN,
                 high: int = INT64_MAX, most: int = 2**21) -> tuple[int, ...]:
        self.expect(isinstance(value, list), field, "expected a list of integers", value)
        self.at_most(len(value), field, most, "entries")
        return tuple(self.integer(item, f"{field}[{i}]", low, high) for i, item in enumerate(value))

    def at_most(self, count: int, field: str, limit: int, what: str) -> None:
        """A size limit no legitimate input reaches: it bounds the memory and time one input can
        take (a 300-byte file must not ask for a 20 GB buffer)."""
        self.expect(count <= limit, field, f"{what} over the limit {limit:,}", count)

    def ops(self, value: object, most: int) -> list:
        self.expect(isinstance(value, list), "ops", "expected a list of operations", value)
        self.at_most(len(value), "ops", most, "operations")
        return value

    def op_kind(self, raw: object, where: str, kinds: dict) -> type:
        """The dataclass of one trace op `{"op": name, field: value, ...}`, its fields checked
        against the dataclass's (their values are the caller's to check)."""
        self.expect(isinstance(raw, dict), where, "expected an object", raw)
        kind = kinds.get(raw.get("op")) if isinstance(raw.get("op"), str) else None
        self.expect(kind is not None, f"{where}.op", f"expected one of {', '.join(kinds)}",
                    raw.get("op"))
        self.known_fields(raw, set(kind.__dataclass_fields__) | {"op"}, f"{where}.")
        return kind

    def op_fields(self, raw: dict, kind: type, where: str):
        """(name, "<where>.<name>", value) of each field of op class `kind` in `raw` (after
        `op_kind`), a field left out taking its default, or None where it has none (the value's
        check then names it)."""
        for f in fields(kind):
            default = None if f.default is MISSING else f.default
            yield f.name, f"{where}.{f.name}", raw.get(f.name, default)

    def origin(self, value: object) -> Origin | None:
        if value is None:
            return None
        self.expect(isinstance(value, dict) and set(value) == {"generator", "seed", "index"},
                    "origin", "expected {generator, seed, index}", value)
        return Origin(str(value["generator"]), self.integer(value["seed"], "origin.seed"),
                      self.integer(value["index"], "origin.index"))

    def note(self, value: object) -> str:
        return "" if value is None else str(value)


def few(values, most: int = 8) -> str:
    """The first `most` of `values` as a list, with "..." when there are more (report lines)."""
    values = list(values)
    return f"{values[:most]}{'...' if len(values) > most else ''}"
