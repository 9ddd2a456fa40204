"""Reference model of paged `alloc_extend` / `alloc_decode`: per request, per token, plain Python.

Read it beside ../shared/spec/paged-allocator.md §1.2-§1.4 and §2. The whole contract is one rule:
a token at position t that starts a page (t % P == 0) takes the next page from the head of the
pool; any other token sits in the slot right after the previous token of its request (the first
one right after `last_loc`). The three phases of the spec fall out of that rule; `phase_of` names
them for reports.
"""

from __future__ import annotations

from dataclasses import dataclass

CURRENT_PAGE = "current page"          # phase 1: fill the page that holds last_loc
WHOLE_PAGES = "whole pages"            # phase 2: full new pages, in pool order
LAST_PARTIAL_PAGE = "last partial page"  # phase 3: the start of the last page of the slice
NEW_PAGE = "new page"                  # decode: the token opens a page


@dataclass(frozen=True)
class Expected:
    slots: list[int]
    pages_used: int  # how many head entries of free_pages the call consumes


@dataclass(frozen=True)
class SlotOwner:
    """Who writes an output slot: request index, token position inside it, and phase."""

    rid: int
    position: int
    phase: str


def ceil_pages(num_tokens: int, page_size: int) -> int:
    return (num_tokens + page_size - 1) // page_size


def phase_of(prefix_len: int, seq_len: int, position: int, page_size: int) -> str:
    """Which of the spec's three phases writes token `position` (prefix_len <= position < seq_len)."""
    if position < ceil_pages(prefix_len, page_size) * page_size:
        return CURRENT_PAGE
    if position < seq_len // page_size * page_size:
        return WHOLE_PAGES
    return LAST_PARTIAL_PAGE


def extend_slots(prefix_lens, seq_lens, last_loc, free_pages, page_size: int) -> Expected:
    """Slots written by `alloc_extend` for a batch that satisfies the contract."""
    slots: list[int] = []
    next_page = 0
    for prefix_len, seq_len, slot in zip(prefix_lens, seq_lens, last_loc):
        for position in range(prefix_len, seq_len):
            if position % page_size == 0:
                slot = free_pages[next_page] * page_size
                next_page += 1
            else:
                slot += 1
            slots.append(slot)
    return Expected(slots, next_page)


def decode_slots(seq_lens, last_loc, free_pages, page_size: int) -> Expected:
    """Slots written by `alloc_decode`: one new token per request, at position seq_len - 1."""
    slots: list[int] = []
    next_page = 0
    for seq_len, last in zip(seq_lens, last_loc):
        if (seq_len - 1) % page_size == 0:
            slots.append(free_pages[next_page] * page_size)
            next_page += 1
        else:
            slots.append(last + 1)
    return Expected(slots, next_page)


def owner_of(case, index: int) -> SlotOwner:
    """Which request, token position and phase write output slot `index` (for reports)."""
    if case.target == "decode":
        position = case.seq_lens[index] - 1
        phase = NEW_PAGE if position % case.page_size == 0 else CURRENT_PAGE
        return SlotOwner(index, position, phase)
    for rid, (prefix_len, seq_len) in enumerate(zip(case.prefix_lens, case.seq_lens)):
        if index < seq_len - prefix_len:
            position = prefix_len + index
            return SlotOwner(rid, position, phase_of(prefix_len, seq_len, position,
                                                     case.page_size))
        index -= seq_len - prefix_len
    raise IndexError("slot index past the end of the output")


def expected_for(case) -> Expected:
    """The oracle's answer for a `Case` (strategies/paged/case.py) inside the contract."""
    if case.target == "extend":
        return extend_slots(case.prefix_lens, case.seq_lens, case.last_loc, case.free_pages,
                            case.page_size)
    return decode_slots(case.seq_lens, case.last_loc, case.free_pages, case.page_size)
