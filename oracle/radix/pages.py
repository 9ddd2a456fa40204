"""Cached pages named by their tokens from the root, as small ints: a page's name stands for the
name of the page before it and its own tokens, so naming every page of a path costs its length,
not its square (a page-size-1 tree of 2,048 tokens has 2,048 pages). The implementation's pages,
the model's and those the KV events announce are named by one `PageNames` per trace, so that
they can be set against each other. Plain Python."""

from __future__ import annotations

from collections import Counter

from kvfuzz.oracle.radix.invariants import tail

ROOT = 0  # the name of "no page": what a first page follows


class PageNames:
    def __init__(self):
        self.names: dict[tuple[int, tuple[int, ...]], int] = {}
        self.parts: list[tuple[int, tuple[int, ...]]] = [(ROOT, ())]
        # (page before, a node's key, page size) -> the names of the key's pages: the judge
        # counts every page of both trees after every op, and most nodes are unchanged since the
        # op before, so a node is named once, not once per op (a 1,024-op trace of 2,048
        # page-size-1 pages named 6 million pages one by one). Bounded by the tokens it keeps
        # (RUNS_KEPT, about 16 MB of references): cleared when full.
        self.runs: dict[tuple[int, tuple[int, ...], int], list[int]] = {}
        self.runs_tokens = 0

    def name(self, before: int, tokens) -> int:
        """The page of `tokens` that follows page `before`."""
        key = (before, tuple(tokens))
        found = self.names.get(key)
        if found is None:
            found = self.names[key] = len(self.parts)
            self.parts.append(key)
        return found

    def tokens(self, page: int) -> tuple[int, ...]:
        """Every token from the root to the end of `page`."""
        parts = []
        while page != ROOT:
            page, tokens = self.parts[page]
            parts.append(tokens)
        return tuple(token for part in reversed(parts) for token in part)

    def root(self, ns) -> int:
        """What the first page of namespace `ns` follows (ROOT for the default namespace): a
        name of no tokens, so that `tokens` reads the same."""
        if not ns:
            return ROOT
        key = (-1, (ns,))  # no page follows -1: never a page's own key
        found = self.names.get(key)
        if found is None:
            found = self.names[key] = len(self.parts)
            self.parts.append((ROOT, ()))
        return found

    def of_path(self, ns, tokens, page_size: int) -> list[int]:
        """The names of the whole pages of `tokens` (from the root of `ns`), in order."""
        found, before = [], self.root(ns)
        for start in range(0, len(tokens) - page_size + 1, page_size):
            before = self.name(before, tokens[start:start + page_size])
            found.append(before)
        return found

    RUNS_KEPT = 1 << 20  # tokens of the keys `runs` holds

    def run(self, before: int, key: tuple[int, ...], page_size: int) -> list[int]:
        """The names of the whole pages of `key`, the first following page `before`."""
        memo = (before, key, page_size)
        found = self.runs.get(memo)
        if found is None:
            found = []
            for start in range(0, len(key) - page_size + 1, page_size):
                before = self.name(before, key[start:start + page_size])
                found.append(before)
            if self.runs_tokens + len(key) > self.RUNS_KEPT:
                self.runs.clear()
                self.runs_tokens = 0
            self.runs[memo] = found
            self.runs_tokens += len(key)
        return found

    def count(self, nodes, page_size: int, namespaces: bool = True) -> Counter:
        """Every page of `nodes` (`NodeView`s, parents first), counted; without `namespaces`,
        the same tokens in two namespaces are one page (SGLang's KV events do not name them)."""
        last: dict[tuple, int] = {}  # a node's path -> the name of its last page
        found = Counter()
        for node in nodes:
            before = last[node.parent] if node.parent is not None else \
                self.root(node.path[0] if namespaces else 0)
            names = self.run(before, tuple(node.key), page_size)
            found.update(names)
            last[node.path] = names[-1] if names else before
        return found

    def tail(self, page: int) -> str:
        """The last tokens of `page`, for a report."""
        return tail(self.tokens(page))

    def first_tail(self, pages) -> str:
        """The last tokens of the page of `pages` nearest the root, for a report."""
        return self.tail(min(pages, key=lambda page: len(self.tokens(page))))
