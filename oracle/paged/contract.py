"""Preconditions of paged extend/decode (spec §0, §1.1, §1.5, §2): is a case inside the contract?

A case outside it is never compared against the oracle; the engine records what each
implementation does with it instead. Every violation is reported, each with its numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfuzz.oracle.paged.model import ceil_pages
from kvfuzz.strategies.paged.case import max_page_id

# Violation kinds, also used as counters in summaries.
SEQ_BELOW_PREFIX = "seq < prefix"
LAST_LOC = "last_loc inconsistent with prefix"
OUT_LEN = "output length != sum of extends"
POOL_SHORT = "pool shorter than demand"
BAD_PAGE_ID = "page id outside 1..max for page size"
DUPLICATE_PAGES = "duplicate page ids in pool"


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


def pages_needed(case) -> int:
    """New pages a call consumes: sum of ceil(s/P) - ceil(q/P) (decode: q = s - 1)."""
    page_size = case.page_size
    prefixes = case.prefix_lens if case.target == "extend" else [s - 1 for s in case.seq_lens]
    return sum(max(0, ceil_pages(s, page_size) - ceil_pages(q, page_size))
               for q, s in zip(prefixes, case.seq_lens))


def _page_size_not_power_of_two(case) -> list[Violation]:
    if case.page_size & (case.page_size - 1):
        return [Violation(PAGE_SIZE_NOT_POW2, f"page_size {case.page_size}")]
    return []


PAGE_SIZE_NOT_POW2 = "page size not a power of two"
# Preconditions some implementations add to the common contract, by name (see impl.registry).
EXTRA_PRECONDITIONS = {"power-of-two page size": _page_size_not_power_of_two}


def violations(case, extra: tuple[str, ...] = ()) -> list[Violation]:
    """Every way `case` falls outside the contract (plus the named extra preconditions of one
    implementation); an empty list means the oracle applies."""
    page_size = case.page_size
    found: list[Violation] = []
    if case.target == "extend":
        prefixes = list(case.prefix_lens)
    else:
        prefixes = [s - 1 for s in case.seq_lens]
    for rid, (q, s, last) in enumerate(zip(prefixes, case.seq_lens, case.last_loc)):
        if q < 0 or s < q:
            found.append(Violation(SEQ_BELOW_PREFIX, f"request {rid}: prefix {q}, seq {s}"))
            continue
        problem = _last_loc_problem(q, last, page_size)
        if problem:
            found.append(Violation(LAST_LOC, f"request {rid}: {problem}"))
    if case.output_length() != case.contract_out_len():
        found.append(Violation(OUT_LEN, f"output length {case.output_length()}, "
                                        f"contract length {case.contract_out_len()}"))
    found.extend(_pool_violations(case, page_size))
    for name in extra:
        found.extend(EXTRA_PRECONDITIONS[name](case))
    return found


def _last_loc_problem(prefix_len: int, last_loc: int, page_size: int) -> str:
    # last_loc is only read when the prefix ends mid-page, but the spec's debug invariant
    # (last_loc + 1) % P == prefix % P holds for every well-formed call, -1 included.
    if prefix_len == 0:
        return "" if last_loc == -1 else f"prefix 0 needs last_loc -1, got {last_loc}"
    if (last_loc + 1) % page_size != prefix_len % page_size:
        return (f"(last_loc + 1) % {page_size} = {(last_loc + 1) % page_size} "
                f"!= prefix {prefix_len} % {page_size} = {prefix_len % page_size}")
    # Page 0 is allowed here: the pure function never checks, and upstream's own unit tests
    # extend requests whose last_loc sits in page 0.
    if not 0 <= last_loc // page_size <= max_page_id(page_size):
        return f"last_loc {last_loc} lies in page {last_loc // page_size}, outside the id range"
    return ""


def _pool_violations(case, page_size: int) -> list[Violation]:
    found = []
    need = pages_needed(case)
    if len(case.free_pages) < need:
        found.append(Violation(POOL_SHORT, f"{len(case.free_pages)} free pages, {need} needed"))
    top = max_page_id(page_size)
    bad = [page for page in case.free_pages if not 1 <= page <= top]
    if bad:
        found.append(Violation(BAD_PAGE_ID, f"{len(bad)} ids outside 1..{top}, e.g. {bad[0]}"))
    if len(set(case.free_pages)) != len(case.free_pages):
        found.append(Violation(DUPLICATE_PAGES, f"{len(case.free_pages)} ids, "
                                                f"{len(set(case.free_pages))} distinct"))
    return found
