"""The `Case` type: one call of a paged extend or decode function, and its version-stable JSON form.

Standard library only: the oracle, the implementations, the fuzz targets and pytest all speak it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import (INT64_MAX, FieldReader, Origin, ceil_pages, content_id,
                                      provenance)

FORMAT = "kvfuzz-case/1"
TARGETS = ("extend", "decode")
# Limits no legitimate case reaches; they bound what one file can make the oracle and an
# implementation allocate (tokens are output slots, per request list entries are requests).
MAX_PAGE_SIZE, MAX_REQUESTS, MAX_TOKENS, MAX_POOL = 2**20, 2**14, 2**21, 2**21


def max_page_id(page_size: int) -> int:
    """Largest page whose last slot `page*P + P-1` still fits a signed 64-bit index."""
    return (INT64_MAX - (page_size - 1)) // page_size


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
        Generators and edge classes use it; the oracle keeps its own count
        (oracle.paged.contract)."""
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
        return content_id(self.content())


def to_json(case: Case) -> dict:
    return {"format": FORMAT, **case.content(), **provenance(case)}


_REQUIRED = {"extend": ("prefix_lens", "seq_lens", "last_loc", "free_pages"),
             "decode": ("seq_lens", "last_loc", "free_pages")}
_OPTIONAL = {"format", "target", "page_size", "out_len", "origin", "note"}


def from_json(data: object, source: str = "case") -> Case:
    """Decode and validate a JSON case; every problem is a `FormatError` naming field and value."""
    reader = FieldReader(source)
    reader.document(data, FORMAT, _OPTIONAL | set(_REQUIRED["extend"]))
    target = reader.choice(data.get("target"), "target", TARGETS)
    reader.known_fields(data, _OPTIONAL | set(_REQUIRED[target]), "")
    page_size = reader.integer(data.get("page_size"), "page_size", low=1, high=MAX_PAGE_SIZE)
    lists = {name: reader.int_list(data.get(name), name,
                                   most=MAX_POOL if name == "free_pages" else MAX_REQUESTS)
             for name in _REQUIRED[target]}
    sizes = {name: len(values) for name, values in lists.items() if name != "free_pages"}
    reader.expect(len(set(sizes.values())) <= 1, "seq_lens", "per-request lists differ in length",
                  sizes)
    if target == "extend":
        tokens = sum(max(0, s - q) for q, s in zip(lists["prefix_lens"], lists["seq_lens"]))
        reader.at_most(tokens, "seq_lens", MAX_TOKENS, "tokens to extend (seq - prefix)")
    out_len = data.get("out_len")
    return Case(
        target=target, page_size=page_size, seq_lens=lists["seq_lens"],
        last_loc=lists["last_loc"], free_pages=lists["free_pages"],
        prefix_lens=lists.get("prefix_lens", ()),
        out_len=None if out_len is None else reader.integer(out_len, "out_len", 0, MAX_TOKENS),
        origin=reader.origin(data.get("origin")), note=reader.note(data.get("note")),
    )


def worst_input(target: str) -> dict:
    """The most a file under 1 MB can ask of the harness (the memory test replays it under a
    1 GB bound): extend, one request of MAX_TOKENS tokens over the pages it needs; decode,
    MAX_REQUESTS requests each opening a page."""
    if target == "extend":
        page = 1024
        return {"format": FORMAT, "target": "extend", "page_size": page, "prefix_lens": [0],
                "seq_lens": [MAX_TOKENS], "last_loc": [-1],
                "free_pages": list(range(1, MAX_TOKENS // page + 1))}
    return {"format": FORMAT, "target": "decode", "page_size": 1,
            "seq_lens": [1] * MAX_REQUESTS, "last_loc": [-1] * MAX_REQUESTS,
            "free_pages": list(range(1, MAX_REQUESTS + 1))}
