"""The KV events a prefix cache publishes, folded into what a router believes is cached (SGLang
0.5.23, `mem_cache/events.py`): `("stored", hashes, parent, tokens, block_size)` adds one page
per hash, each page's tokens `block_size` of `tokens`, chained to `parent` (None: the root) and
then to the page before it; `("removed", hashes)` takes pages away; `("cleared",)` forgets all.
Pages are named by their tokens from the root, so the belief can be set against the cache's own
pages however the hashes are computed. Plain Python."""

from __future__ import annotations

from collections import Counter

from kvfuzz.oracle.radix.invariants import tail


class EventLedger:
    def __init__(self):
        self.paths: dict[int, tuple[int, ...]] = {}  # hash -> the page's tokens from the root
        self.present: Counter = Counter()

    def fold(self, events) -> list[str]:
        """Apply `events` in order; the problems of events that cannot be applied."""
        problems = []
        for event in events:
            kind = event[0]
            if kind == "cleared":
                self.present.clear()
            elif kind == "stored":
                problems += self._stored(*event[1:])
            elif kind == "removed":
                for h in event[1]:
                    path = self.paths.get(h)
                    if path is None or not self.present[path]:
                        problems.append(f"BlockRemoved of block {h}, which is not stored")
                        continue
                    self.present[path] -= 1
            else:
                problems.append(f"an event of unknown kind {kind!r}")
        self.present = +self.present
        return problems[:4]

    def _stored(self, hashes, parent, tokens, block_size) -> list[str]:
        if parent is None:
            before = ()
        elif parent in self.paths:
            before = self.paths[parent]
        else:
            return [f"BlockStored chained to block {parent}, which was never stored"]
        if block_size <= 0 or len(tokens) != len(hashes) * block_size:
            return [f"BlockStored of {len(hashes)} blocks of {block_size} with {len(tokens)} "
                    f"tokens"]
        for i, h in enumerate(hashes):
            before = before + tuple(tokens[i * block_size:(i + 1) * block_size])
            self.paths[h] = before
            self.present[before] += 1
        return []

    def compare(self, cached: Counter) -> list[str]:
        """What a router believes against the pages the cache holds (`cached`)."""
        if self.present == cached:
            return []
        missing, stale = cached - self.present, self.present - cached
        problems = []
        if missing:
            path = min(missing, key=len)
            problems.append(f"{sum(missing.values())} cached pages never announced (or removed "
                            f"while cached), e.g. the page ending [{tail(path)}]")
        if stale:
            path = min(stale, key=len)
            problems.append(f"{sum(stale.values())} announced pages not cached (stored minus "
                            f"removed exceeds what is present), e.g. the page ending "
                            f"[{tail(path)}]")
        return problems
