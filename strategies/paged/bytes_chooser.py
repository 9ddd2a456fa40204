"""Fuzzer bytes -> valid-by-construction `Case`s, through the same builders as every other source,
and the inverse (`encode`) that turns a saved JSON case back into bytes that decode to it.

Byte format (ours, not FuzzedDataProvider's, because seeding from the JSON corpus needs an exact
inverse): `integer(lo, hi)` reads the fewest big-endian bytes that cover the span and takes the
value modulo the span; exhausted bytes read as `lo`, the simplest option, so a short input is a
simple case and no input raises. The first choice picks a mode: "build" runs
`build.py` (reaches every edge class on purpose); "literal" spells a case field by field
(any valid case can be written this way, which is what `encode` does), and is still valid by
construction: last_loc is derived from a held page, the pool is made distinct and long enough.
"""

from __future__ import annotations

from typing import Sequence

from kvfuzz.strategies.inputs import ceil_pages
from kvfuzz.strategies.paged.build import build_decode, build_extend
from kvfuzz.strategies.paged.case import Case, max_page_id

MODES = ("build", "build", "build", "literal")
LITERAL = 3                     # the byte that selects "literal"
LITERAL_TOKEN_BUDGET = 16384    # extend tokens per literal case (keeps the oracle cheap)
MAX_PAGE_SIZE, MAX_BATCH, MAX_LEN, MAX_SLACK = 2**20, 512, 2**31, 2**12
NOTE = "found by kvfuzz fuzz (atheris)"


class BytesChooser:
    """The `build.Chooser` protocol over a byte string (or an atheris
    `FuzzedDataProvider`, whose remaining bytes are taken whole)."""

    def __init__(self, data):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            data = data.ConsumeBytes(data.remaining_bytes())  # a FuzzedDataProvider
        self.data, self.pos = bytes(data), 0

    def integer(self, low: int, high: int) -> int:
        span = high - low + 1
        width = _width(span)
        chunk = self.data[self.pos:self.pos + width]
        self.pos += width
        return low + int.from_bytes(chunk, "big") % span if chunk else low

    def take(self, count: int) -> bytes:
        """The next `count` raw bytes (fewer where they run out)."""
        chunk = self.data[self.pos:self.pos + count]
        self.pos += count
        return chunk

    def choice(self, options: Sequence):
        return options[self.integer(0, len(options) - 1)]

    def distinct(self, low: int, high: int, count: int) -> list[int]:
        # A repeated value moves to the next unused one (wrapping): a distinct list reads back
        # as itself, and exhausted bytes give low, low+1, ... Union-find keeps probing O(1).
        if count > high - low + 1:
            raise ValueError(f"{count} distinct values do not fit [{low}, {high}]")
        taken: dict[int, int] = {}
        values = []
        for _ in range(count):
            value = _free(taken, self.integer(low, high), low, high)
            taken[value] = low if value == high else value + 1
            values.append(value)
        return values

    def shuffled(self, values: list[int]) -> list[int]:
        values = list(values)
        for i in range(len(values) - 1, 0, -1):
            j = i - self.integer(0, i)  # exhausted bytes: no swap, the identity
            values[i], values[j] = values[j], values[i]
        return values


def _width(span: int) -> int:
    return ((span - 1).bit_length() + 7) // 8  # 0 for a single option: nothing to read


def _free(taken: dict[int, int], value: int, low: int, high: int) -> int:
    path = []
    while value in taken:
        path.append(value)
        value = taken[value]
    for seen in path:  # path compression
        taken[seen] = value
    return value


def decode(data, target: str) -> Case:
    """The case that fuzzer bytes `data` stand for; never raises for any input."""
    ch = BytesChooser(data)
    if ch.choice(MODES) == "build":
        case = (build_extend if target == "extend" else build_decode)(ch)
    else:
        case = _literal(ch, target)
    return Case(case.target, case.page_size, case.seq_lens, case.last_loc, case.free_pages,
                case.prefix_lens, note=NOTE)


def _literal(ch: BytesChooser, target: str) -> Case:
    page_size = ch.integer(1, MAX_PAGE_SIZE)
    top = max_page_id(page_size)
    prefixes, seqs, last_loc, budget = [], [], [], LITERAL_TOKEN_BUDGET
    for _ in range(ch.integer(1, MAX_BATCH)):
        if target == "extend":
            prefix = ch.integer(0, MAX_LEN)
            seq = prefix + min(ch.integer(0, MAX_LEN), budget)
            budget -= seq - prefix
        else:
            seq = ch.integer(1, MAX_LEN)
            prefix = seq - 1
        held = ch.integer(1, top) if prefix > 0 else 0
        prefixes.append(prefix)
        seqs.append(seq)
        last_loc.append(held * page_size + (prefix - 1) % page_size if prefix > 0 else -1)
    demand = sum(ceil_pages(s, page_size) - ceil_pages(q, page_size)
                 for q, s in zip(prefixes, seqs))
    free = ch.distinct(1, top, demand + ch.integer(0, MAX_SLACK))
    return Case(target, page_size, tuple(seqs), tuple(last_loc), tuple(free),
                prefix_lens=tuple(prefixes) if target == "extend" else ())


def encode(case: Case) -> bytes | None:
    """Bytes that `decode` turns back into `case` (literal mode), or None when the case cannot be
    spelled that way (outside the contract, or past the literal limits)."""
    out = bytearray([LITERAL])
    page_size = case.page_size
    if not 1 <= page_size <= MAX_PAGE_SIZE or not 1 <= case.batch_size <= MAX_BATCH:
        return None
    top = max_page_id(page_size)
    _put(out, page_size, 1, MAX_PAGE_SIZE)
    _put(out, case.batch_size, 1, MAX_BATCH)
    prefixes = case.prefix_lens if case.target == "extend" else [s - 1 for s in case.seq_lens]
    for q, s, loc in zip(prefixes, case.seq_lens, case.last_loc):
        if case.target == "extend":
            _put(out, q, 0, MAX_LEN)
            _put(out, s - q, 0, MAX_LEN)
        else:
            _put(out, s, 1, MAX_LEN)
        if q > 0:
            _put(out, loc // page_size, 1, top)
    demand = sum(ceil_pages(s, page_size) - ceil_pages(q, page_size)
                 for q, s in zip(prefixes, case.seq_lens))
    _put(out, len(case.free_pages) - demand, 0, MAX_SLACK)
    for page in case.free_pages:
        _put(out, page, 1, top)
    data = bytes(out)
    try:
        return data if decode(data, case.target) == case else None
    except Exception:  # a value out of a field's range, e.g. a negative length: not spellable
        return None


def _put(out: bytearray, value: int, low: int, high: int) -> None:
    span = high - low + 1
    width = _width(span)
    offset = value - low
    if 0 <= offset < span:
        out += offset.to_bytes(width, "big")
    else:
        out += b"\xff" * width  # out of range: the round-trip check in `encode` rejects it
