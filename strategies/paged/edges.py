"""Edge classes of extend/decode cases: counted in every run, so "did we ever test an empty pool?"
has an answer, and a test fails when a generator stops reaching one.
"""

from __future__ import annotations

from kvfuzz.strategies.inputs import ceil_pages
from kvfuzz.strategies.paged.case import Case, max_page_id


def _page_size_class(page_size: int) -> str:
    if page_size in (1, 2, 64, 128):
        return f"P={page_size}"
    if page_size & (page_size - 1):
        return "P not a power of two"
    return "P>128" if page_size > 128 else "P other power of two"


PAGE_SIZE_CLASSES = ("P=1", "P=2", "P other power of two", "P not a power of two", "P=64",
                     "P=128", "P>128")
EXTEND_CLASSES = PAGE_SIZE_CLASSES + (
    "zero prefix", "prefix page-aligned", "seq page-aligned", "prefix and seq page-aligned",
    "zero extend first", "zero extend middle", "zero extend last",
    "extend inside current page", "extend fills current page exactly", "extend spans many pages",
    "batch 1", "batch >= 32", "pool empty", "pool exactly the demand", "pool with slack",
    "pool ascending", "pool descending", "pool random order",
    "page ids small", "page ids past 2**32", "page id at the 64-bit limit",
)
DECODE_CLASSES = PAGE_SIZE_CLASSES + (
    "first token of a request", "token opens a page", "token inside a page",
    "batch 1", "batch >= 32", "pool empty", "pool exactly the demand", "pool with slack",
    "pool ascending", "pool descending", "pool random order",
    "page ids small", "page ids past 2**32", "page id at the 64-bit limit",
)
CLASSES = {"extend": EXTEND_CLASSES, "decode": DECODE_CLASSES}


def edge_classes(case: Case) -> set[str]:
    """The edge classes `case` reaches (for a case inside the contract)."""
    found = {_page_size_class(case.page_size)}
    found |= _batch_classes(case.batch_size)
    found |= _pool_classes(case)
    if case.target == "extend":
        found |= _extend_classes(case)
    else:
        found |= _decode_classes(case)
    return found


def _batch_classes(batch_size: int) -> set[str]:
    return {"batch 1"} if batch_size == 1 else {"batch >= 32"} if batch_size >= 32 else set()


def _pool_classes(case: Case) -> set[str]:
    found = set()
    pages, page_size = case.free_pages, case.page_size
    demand = case.pages_needed()
    if not pages:
        found.add("pool empty")
    elif len(pages) == demand:
        found.add("pool exactly the demand")
    elif len(pages) > demand:
        found.add("pool with slack")
    if len(pages) >= 2:
        if list(pages) == sorted(pages):
            found.add("pool ascending")
        elif list(pages) == sorted(pages, reverse=True):
            found.add("pool descending")
        else:
            found.add("pool random order")
    ids = list(pages) + [loc // page_size for loc in case.last_loc if loc >= 0]
    if ids and max(ids) < 2**16:
        found.add("page ids small")
    if ids and max(ids) > 2**32:
        found.add("page ids past 2**32")
    if ids and max(ids) >= max_page_id(page_size) - 2:
        found.add("page id at the 64-bit limit")
    return found


def _extend_classes(case: Case) -> set[str]:
    found, page_size = set(), case.page_size
    last = case.batch_size - 1
    for rid, (q, s) in enumerate(zip(case.prefix_lens, case.seq_lens)):
        ceil_q = ceil_pages(q, page_size) * page_size
        if q == 0:
            found.add("zero prefix")
        elif q % page_size == 0:
            found.add("prefix page-aligned")
        if s > q and s % page_size == 0:
            found.add("prefix and seq page-aligned" if q % page_size == 0 else "seq page-aligned")
        if s == q and case.batch_size > 1:
            found.add("zero extend first" if rid == 0 else
                      "zero extend last" if rid == last else "zero extend middle")
        if q < s < ceil_q:
            found.add("extend inside current page")
        if q % page_size and s == ceil_q:
            found.add("extend fills current page exactly")
        if ceil_pages(s, page_size) - ceil_pages(q, page_size) >= 3:
            found.add("extend spans many pages")
    return found


def _decode_classes(case: Case) -> set[str]:
    found = set()
    for s in case.seq_lens:
        if s == 1:
            found.add("first token of a request")
        elif (s - 1) % case.page_size == 0:
            found.add("token opens a page")
        else:
            found.add("token inside a page")
    return found
