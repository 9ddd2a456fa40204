"""Smaller paged cases to try when shrinking a divergence (the engine's `kvfuzz.fuzz.engine.shrink`
keeps those that still fail the same way).

In order: drop requests (halves, then one at a time), shrink each request's lengths, trim the pool
to the demand, renumber page ids small, sort the pool, shrink the page size. Candidates outside
the contract simply fail to fail (they are never compared), so no pass needs to be careful.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from kvfuzz.strategies.inputs import ceil_pages
from kvfuzz.strategies.paged.case import Case


def size(case: Case) -> tuple:
    # Fewer requests, then fewer tokens and pages, then smaller numbers: the order shrinking
    # helps a reader most.
    tokens = sum(case.seq_lens) + sum(case.prefix_lens)
    descents = sum(a > b for a, b in zip(case.free_pages, case.free_pages[1:]))
    return (case.batch_size, tokens, len(case.free_pages), case.page_size,
            sum(case.free_pages) + sum(abs(x) for x in case.last_loc), descents)


def _requests(case: Case) -> list[tuple[int, int, int]]:
    held = [loc // case.page_size for loc in case.last_loc]
    return list(zip(case.prefixes(), case.seq_lens, held))


def _rebuild(case: Case, requests, free=None, page_size=None) -> Case:
    """A case from (prefix, seq, held page) per request; last_loc follows from them."""
    page_size = page_size or case.page_size
    last_loc = tuple(page * page_size + (q - 1) % page_size if q > 0 else -1
                     for q, _, page in requests)
    return replace(case, page_size=page_size, seq_lens=tuple(s for _, s, _ in requests),
                   last_loc=last_loc, free_pages=tuple(case.free_pages if free is None else free),
                   prefix_lens=tuple(q for q, _, _ in requests) if case.target == "extend" else ())


def _smaller(n: int) -> list[int]:
    """0, n/2, 3n/4, ..., n-1: big cuts first, then finer (a binary search, greedily)."""
    values, cut = [], n
    while cut:
        values.append(n - cut)
        cut //= 2
    return values


def candidates(case: Case) -> Iterator[Case]:
    requests = _requests(case)
    count = len(requests)
    demand = _demand(requests, case.page_size)
    pool = case.free_pages
    for chunk in sorted({count - kept for kept in _smaller(count) if kept}, reverse=True):
        for start in range(0, count, chunk):
            yield from _both(case, requests[:start] + requests[start + chunk:], demand)
    for smaller in _shorter_requests(case, requests):
        yield from _both(case, smaller, demand)
    for kept in _smaller(len(pool)):
        if kept >= demand:
            yield _rebuild(case, requests, pool[:kept])
    if len(pool) <= 64:
        for at in range(len(pool)):
            yield _rebuild(case, requests, pool[:at] + pool[at + 1:])
    yield _renumbered(case, requests)
    yield _rebuild(case, requests, sorted(pool))
    for page_size in (1, 2, 4, case.page_size // 2):
        if 1 <= page_size < case.page_size:
            yield _with_page_size(case, requests, page_size)


def _demand(requests, page_size: int) -> int:
    return sum(ceil_pages(s, page_size) - ceil_pages(q, page_size) for q, s, _ in requests)


def _both(case: Case, requests, demand: int) -> Iterator[Case]:
    """Fewer or shorter requests, first with the pool cut by as many pages as the demand fell
    (a tight pool stays tight), then with the pool as it was."""
    slack = len(case.free_pages) - demand
    yield _rebuild(case, requests, case.free_pages[:_demand(requests, case.page_size) + slack])
    yield _rebuild(case, requests)


def _shorter_requests(case: Case, requests) -> Iterator[list]:
    step = case.page_size
    for rid, (q, s, page) in enumerate(requests):
        if case.target == "decode":
            options = [(s2 - 1, s2) for s2 in [1 + n for n in _smaller(s - 1)] +
                       [(s - 1) % step + 1 + m * step for m in _smaller((s - 1) // step)]]
        else:
            options = [(q, q + e) for e in _smaller(s - q)]
            options += [(q2, q2 + s - q) for q2 in _smaller(q)]
            options += [(q % step + m * step, q % step + m * step + s - q)
                        for m in _smaller(q // step)]
        for q2, s2 in options:
            if 0 <= q2 <= s2 and (q2, s2) != (q, s):
                yield requests[:rid] + [(q2, s2, max(1, page))] + requests[rid + 1:]


def _renumbered(case: Case, requests) -> Case:
    """Every page id replaced by its rank among all ids: order kept, numbers small."""
    ids = sorted(set(case.free_pages) | {page for q, _, page in requests if q > 0})
    rank = {page: i + 1 for i, page in enumerate(ids)}
    moved = [(q, s, rank.get(page, 1)) for q, s, page in requests]
    return _rebuild(case, moved, [rank[page] for page in case.free_pages])


def _with_page_size(case: Case, requests, page_size: int) -> Case:
    """Same lengths and pages on a smaller page size; the pool topped up if the demand grew."""
    demand = _demand(requests, page_size)
    free = list(case.free_pages)
    fresh = max(free + [page for _, _, page in requests] + [0]) + 1
    free += range(fresh, fresh + max(0, demand - len(free)))
    return _rebuild(case, requests, free, page_size)
