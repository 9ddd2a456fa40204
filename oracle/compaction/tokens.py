"""Pages and tokens at a page size above 1: SGLang's `MultiEndedAllocator` (0.5.23) keeps its
tables, holes and frontiers in pages, but `alloc`, `free` and the load-back reservation take and
return tokens. What the oracle says about them, in plain Python.

    token t lies in page t // page_size, at offset t % page_size;
    page p holds tokens [p * page_size, (p + 1) * page_size)
"""

from __future__ import annotations


def tokens_of(pages: list[int], page_size: int) -> list[int]:
    """The tokens of `pages`, page by page in the order given, each page's in offset order
    (`_expand_pages_to_tokens`): what an allocation of those vids returns (virtual tokens), and
    a reservation of those pages (physical slots)."""
    return [page * page_size + offset for page in pages for offset in range(page_size)]


def pages_freed(vids: list[int], page_size: int) -> list[int]:
    """The vids a `free` of their tokens releases, in the order the class releases them: at
    page size 1 as given (a token is its page; callers pass distinct ids), above it the distinct
    pages the tokens fall in, ascending (`torch.unique(tokens // page_size)`): the order the
    pages join the holes and the vids the free list."""
    return list(vids) if page_size == 1 else sorted(set(vids))


def pages_named(tokens: list[int], page_size: int) -> list[int]:
    """The pages some tokens fall in, each once, in the order first named (how a result in
    tokens reads as pages, e.g. in a report)."""
    return list(dict.fromkeys(token // page_size for token in tokens))
