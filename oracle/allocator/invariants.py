"""Invariants of the paged allocator under a scheduler (spec §0, §4.12), over plain values, so
they check the model and any implementation alike. Every violation is returned, with its numbers.
"""

from __future__ import annotations

from collections import Counter

ENGINE = -1  # the holder of pages a live guard saw handed out: the engine, not one request


def state_violations(num_pages: int, free: list[int], staged: list[int], pending: list[int],
                     holders: dict[int, set[int]]) -> list[str]:
    """Every page 1..N is exactly one of: free, staged, pending in a free group, held by live
    request(s); page 0 is none of them. `holders`: page -> rids of the live requests holding it."""
    held = [page for page, rids in holders.items() if rids]
    listed = free + staged + pending + held
    if len(listed) == num_pages and set(listed) == set(range(1, num_pages + 1)):
        return []  # the common case, in one pass: a partition of 1..N
    problems = []
    places = {"free list": Counter(free), "staged": Counter(staged),
              "pending group": Counter(pending)}
    for name, counts in places.items():
        if 0 in counts:
            problems.append(f"page 0 (the padding page) is on the {name}")
        outside = sorted(p for p in counts if not 0 <= p <= num_pages)
        if outside:
            problems.append(f"pages outside 1..{num_pages} on the {name}: {outside[:6]}")
        twice = sorted(p for p, n in counts.items() if n > 1)
        if twice:
            problems.append(f"{len(twice)} pages twice on the {name} (double free), "
                            f"e.g. {_few(twice, counts)}")
    names = list(places)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            both = sorted(set(places[first]) & set(places[second]))
            if both:
                problems.append(f"pages both on the {first} and {second}: {both[:6]}")
        held = sorted(p for p in places[first] if holders.get(p))
        if held:
            page = held[0]
            problems.append(f"{len(held)} pages on the {first} but held by live requests, e.g. "
                            f"page {page} held by {_rids(holders[page])}")
    if holders.get(0):
        problems.append(f"page 0 (the padding page) held by {_rids(holders[0])}")
    known = set(free) | set(staged) | set(pending) | {p for p, r in holders.items() if r}
    lost = sorted(set(range(1, num_pages + 1)) - known)
    if lost:
        problems.append(f"{len(lost)} pages neither free, staged, pending nor held (lost), "
                        f"e.g. {lost[:6]}")
    return problems


def new_slot_violations(rid: int, start: int, slots: list[int], row: list[int], page_size: int,
                        holders: dict[int, set[int]]) -> list[str]:
    """Slots handed to request `rid` for positions start.. (its row holds positions < start):
    page-aligned (slot % P == position % P), outside page 0, a continued page is the request's
    own page, an opened page is held by no live request."""
    problems = []
    for position, slot in enumerate(slots, start):
        page, where = slot // page_size, f"{_who(rid)} position {position} got slot {slot}"
        if slot < page_size:
            problems.append(f"{where} in page 0 (the padding page)")
        elif slot % page_size != position % page_size:
            problems.append(f"{where}: slot % {page_size} = {slot % page_size}, "
                            f"position % {page_size} = {position % page_size} (not page-aligned)")
        elif position % page_size:
            first = position - position % page_size
            own = (row[first] if first < start else slots[first - start]) // page_size
            if page != own:
                problems.append(f"{where} in page {page}, but its page for positions "
                                f"{first}..{first + page_size - 1} is {own}")
        elif holders.get(page):
            problems.append(f"{where}: page {page} is already held by {_rids(holders[page])}")
        if len(problems) >= 6:
            break
    duplicates = [s for s, n in Counter(slots).items() if n > 1]
    if duplicates:
        problems.append(f"{_who(rid)} got slots twice in one call: {sorted(duplicates)[:6]}")
    return problems


def _who(rid: int) -> str:
    return "the engine's request" if rid == ENGINE else f"request r{rid}"


def _rids(rids) -> str:
    return ", ".join("the engine" if r == ENGINE else f"r{r}" for r in sorted(rids))


def _few(pages: list[int], counts: Counter) -> str:
    return ", ".join(f"page {p} x{counts[p]}" for p in pages[:4])
