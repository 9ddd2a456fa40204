"""The `Case` type: one call of a paged extend or decode function, and its version-stable JSON form.

Standard library only: the oracle, the implementations, the fuzz targets and pytest all speak it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

FORMAT = "kvfuzz-case/1"
TARGETS = ("extend", "decode")
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def ceil_pages(num_tokens: int, page_size: int) -> int:
    return (num_tokens + page_size - 1) // page_size


def max_page_id(page_size: int) -> int:
    """Largest page whose last slot `page*P + P-1` still fits a signed 64-bit index."""
    return (INT64_MAX - (page_size - 1)) // page_size


class CaseFormatError(ValueError):
    """A case file or dict is malformed; the message names the source, the field and the value."""


@dataclass(frozen=True)
class Origin:
    """Where a generated case came from: case `index` of `seed` of a versioned `generator`."""

    generator: str
    seed: int
    index: int

    def describe(self) -> str:
        return f"generator {self.generator}, seed {self.seed}, index {self.index}"


@dataclass(frozen=True)
class Case:
    """One call of `alloc_extend` (target "extend") or `alloc_decode` (target "decode").

    Decode has no `prefix_lens`: its prefix is `seq_lens - 1` by definition (spec §2).
    `out_len` is None when the output has the contract's length; a number only for cases built
    on purpose outside the contract. `origin` and `note` are provenance, not content: two cases
    that differ only there are the same case and share an id.
    """

    target: str
    page_size: int
    seq_lens: tuple[int, ...]
    last_loc: tuple[int, ...]
    free_pages: tuple[int, ...]
    prefix_lens: tuple[int, ...] = ()
    out_len: int | None = None
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    def contract_out_len(self) -> int:
        if self.target == "decode":
            return self.batch_size
        return sum(s - q for q, s in zip(self.prefix_lens, self.seq_lens))

    def prefixes(self) -> tuple[int, ...]:
        """Tokens stored before the call, per request (decode: seq - 1)."""
        return self.prefix_lens if self.target == "extend" else tuple(s - 1 for s in self.seq_lens)

    def pages_needed(self) -> int:
        """New pages the call consumes (spec §1.2): sum of ceil(s/P) - ceil(q/P), never < 0 each.
        Generators and edge classes use it; the oracle keeps its own count (oracle.contract)."""
        return sum(max(0, ceil_pages(s, self.page_size) - ceil_pages(q, self.page_size))
                   for q, s in zip(self.prefixes(), self.seq_lens))

    def output_length(self) -> int:
        """Length of the output buffer handed to an implementation."""
        return self.out_len if self.out_len is not None else max(0, self.contract_out_len())

    def content(self) -> dict:
        data = {"target": self.target, "page_size": self.page_size}
        if self.target == "extend":
            data["prefix_lens"] = list(self.prefix_lens)
        data["seq_lens"] = list(self.seq_lens)
        data["last_loc"] = list(self.last_loc)
        data["free_pages"] = list(self.free_pages)
        if self.out_len is not None:
            data["out_len"] = self.out_len
        return data

    def case_id(self) -> str:
        """A short hash of the content: stable across runs, machines and provenance."""
        canonical = json.dumps(self.content(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def to_json(case: Case) -> dict:
    data = {"format": FORMAT, **case.content()}
    if case.origin is not None:
        data["origin"] = {"generator": case.origin.generator, "seed": case.origin.seed,
                          "index": case.origin.index}
    if case.note:
        data["note"] = case.note
    return data


def dumps(case: Case) -> str:
    return json.dumps(to_json(case), indent=1) + "\n"


_REQUIRED = {"extend": ("prefix_lens", "seq_lens", "last_loc", "free_pages"),
             "decode": ("seq_lens", "last_loc", "free_pages")}
_OPTIONAL = {"format", "target", "page_size", "out_len", "origin", "note"}


def from_json(data: object, source: str = "case") -> Case:
    """Decode and validate a JSON case; every problem is a `CaseFormatError` naming field and value."""
    reader = _Reader(source)
    if not isinstance(data, dict):
        reader.fail("(top level)", "expected a JSON object", type(data).__name__)
    if data.get("format") != FORMAT:
        reader.fail("format", f"expected {FORMAT!r}", data.get("format"))
    target = data.get("target")
    if target not in TARGETS:
        reader.fail("target", f"expected one of {', '.join(TARGETS)}", target)
    unknown = set(data) - _OPTIONAL - set(_REQUIRED[target])
    if unknown:
        name = sorted(unknown)[0]
        reader.fail(name, "unknown field", data[name])
    page_size = reader.integer(data, "page_size", low=1)
    lists = {name: reader.int_list(data, name) for name in _REQUIRED[target]}
    sizes = {name: len(values) for name, values in lists.items() if name != "free_pages"}
    if len(set(sizes.values())) > 1:
        reader.fail("seq_lens", "per-request lists differ in length", sizes)
    out_len = None if data.get("out_len") is None else reader.integer(data, "out_len", low=0)
    return Case(
        target=target, page_size=page_size, seq_lens=lists["seq_lens"],
        last_loc=lists["last_loc"], free_pages=lists["free_pages"],
        prefix_lens=lists.get("prefix_lens", ()), out_len=out_len,
        origin=reader.origin(data.get("origin")), note=str(data.get("note", "")),
    )


def loads(text: str, source: str = "case") -> Case:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:  # also a 4300+ digit number, deep nesting
        raise CaseFormatError(f"{source}: not valid JSON: {error}") from None
    return from_json(data, source)


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, name: str, problem: str, value: object) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise CaseFormatError(f"{self.source}: field '{name}': {problem}, got {shown}")

    def integer(self, data: dict, name: str, low: int = INT64_MIN) -> int:
        value = data.get(name)
        if type(value) is not int or not low <= value <= INT64_MAX:
            self.fail(name, f"expected an integer in [{low}, 2**63-1]", value)
        return value

    def int_list(self, data: dict, name: str) -> tuple[int, ...]:
        values = data.get(name)
        if not isinstance(values, list):
            self.fail(name, "expected a list of integers", values)
        for position, value in enumerate(values):
            if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
                self.fail(f"{name}[{position}]", "expected a 64-bit integer", value)
        return tuple(values)

    def origin(self, value: object) -> Origin | None:
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) != {"generator", "seed", "index"}:
            self.fail("origin", "expected {generator, seed, index}", value)
        return Origin(str(value["generator"]), self.integer(value, "seed"),
                      self.integer(value, "index"))
