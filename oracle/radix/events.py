"""The KV events a prefix cache publishes, folded into what a router believes is cached (SGLang
0.5.23, `mem_cache/events.py`): `("stored", hashes, parent, tokens, block_size)` adds one page
per hash, each page's tokens `block_size` of `tokens`, chained to `parent` (None: the root) and
then to the page before it; `("removed", hashes)` takes pages away; `("cleared",)` forgets all.
Pages are named by their tokens from the root (`pages.PageNames`), so the belief can be set
against the cache's own pages however the hashes are computed. Plain Python."""

from __future__ import annotations

from collections import Counter

from kvfuzz.oracle.counts import same_counts
from kvfuzz.oracle.radix.pages import ROOT, PageNames


class EventLedger:
    def __init__(self, names: PageNames):
        self.names = names
        self.pages: dict[int, int] = {}  # hash -> the page it names
        self.present: Counter = Counter()

    def fold(self, events) -> list[str]:
        """Apply `events` in order; the problems of events that cannot be applied."""
        if not events:
            return []
        problems = []
        for event in events:
            kind = event[0]
            if kind == "cleared":
                self.present.clear()
            elif kind == "stored":
                problems += self._stored(*event[1:])
            elif kind == "removed":
                for h in event[1]:
                    page = self.pages.get(h)
                    if page is None or not self.present[page]:
                        problems.append(f"BlockRemoved of block {h}, which is not stored")
                        continue
                    self.present[page] -= 1
            else:
                problems.append(f"an event of unknown kind {kind!r}")
        self.present = +self.present
        return problems[:4]

    def _stored(self, hashes, parent, tokens, block_size) -> list[str]:
        if parent is not None and parent not in self.pages:
            return [f"BlockStored chained to block {parent}, which was never stored"]
        if block_size <= 0 or len(tokens) != len(hashes) * block_size:
            return [f"BlockStored of {len(hashes)} blocks of {block_size} with {len(tokens)} "
                    f"tokens"]
        before = ROOT if parent is None else self.pages[parent]
        for i, h in enumerate(hashes):
            before = self.names.name(before, tokens[i * block_size:(i + 1) * block_size])
            self.pages[h] = before
            self.present[before] += 1
        return []

    def compare(self, cached: Counter) -> list[str]:
        """What a router believes against the pages the cache holds (`cached`)."""
        if same_counts(self.present, cached):
            return []
        missing, stale = cached - self.present, self.present - cached
        problems = []
        if missing:
            problems.append(f"{sum(missing.values())} cached pages never announced (or removed "
                            f"while cached), e.g. the page ending "
                            f"[{self.names.first_tail(missing)}]")
        if stale:
            problems.append(f"{sum(stale.values())} announced pages not cached (stored minus "
                            f"removed exceeds what is present), e.g. the page ending "
                            f"[{self.names.first_tail(stale)}]")
        return problems