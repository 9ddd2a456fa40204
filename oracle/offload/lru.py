"""The LRU policy of vLLM's CPU offloading manager (vllm 0.33.0, `cpu/policies/lru.py`) as plain
ranks. Every chunk in the cache has a rank; the evictable ones (stored, no load in flight) go in
rank order, lowest first, ties by key (vLLM's heap compares (rank, key bytes), and a key's bytes
are its hash then its group, big-endian).

- A rank is (n, -position) or (n, 0). n counts up from 1: a request takes one n for all its keys
  the first time it is seen (stores with positions, request accesses), so within a request later
  chunks (larger positions) rank lower and go first; a stored key without a position, a touch
  and a finished request's keys take a fresh n each.
- `touch(keys)`: fresh n to each key in the cache, the last key first (the first key ends most
  recent); keys not in the cache are left alone and use no n.
- A request access (`on_request_access`): each key in the cache with a position takes
  (request's n, -position) unless its rank is already at least that.
- A finished request (`on_request_finished`): its keys in head-to-tail order, touched.
- Recency moves while a chunk is pinned; pinning only decides whether it may go.
- A miss of a store (`on_store_miss`) is a touch (the default of vLLM's policy base), of keys
  that are not in the cache by definition.
- `evict(n, protected)`: the n lowest evictable keys outside `protected`, or None (nothing
  changes) when there are fewer. `clear()`: everything, n back to 0.
"""

from __future__ import annotations

Key = tuple[int, int]


class LRUPolicy:
    def __init__(self, capacity: int):
        self.clear()

    def clear(self) -> None:
        self.rank: dict[Key, tuple[int, int]] = {}  # every key in the cache
        self.evictable: set[Key] = set()
        self.request_n: dict[int, int] = {}
        self.n = 0

    def _fresh(self) -> tuple[int, int]:
        self.n += 1
        return self.n, 0

    def _of_request(self, rid: int) -> int:
        if rid not in self.request_n:
            self.n += 1
            self.request_n[rid] = self.n
        return self.request_n[rid]

    def insert(self, key: Key, rid: int, positions: dict) -> None:
        where = positions.get(key)
        self.rank[key] = self._fresh() if where is None else (self._of_request(rid), -where)

    def remove(self, key: Key) -> None:
        del self.rank[key]
        self.evictable.discard(key)

    def pin(self, key: Key) -> None:
        self.evictable.discard(key)

    def unpin(self, key: Key) -> None:
        self.evictable.add(key)

    def touch(self, keys, ref) -> None:
        for key in reversed(list(keys)):
            if key in self.rank:
                self.rank[key] = self._fresh()

    def on_store_miss(self, keys, ref) -> None:
        self.touch(keys, ref)

    def on_request_access(self, rid: int, keys, positions: dict) -> None:
        n = self._of_request(rid)
        for key in keys:
            if key in self.rank and key in positions and self.rank[key] < (n, -positions[key]):
                self.rank[key] = (n, -positions[key])

    def on_request_finished(self, ordered, inserted_only, reused, ref) -> None:
        self.touch(ordered, ref)

    def evict(self, count: int, protected: set, ref) -> list[Key] | None:
        order = sorted((self.rank[key], key) for key in self.evictable if key not in protected)
        if len(order) < count:
            return None
        chosen = [key for _, key in order[:count]]
        for key in chosen:
            self.remove(key)
        return chosen

    def view(self) -> dict:
        """Every key in rank order (eviction order among the evictable), and the evictable."""
        return {"order": [key for _, key in sorted((r, k) for k, r in self.rank.items())],
                "evictable": sorted(self.evictable)}


class RecencyRankLRUPolicy(LRUPolicy):
    """vLLM 0.31 and 0.32's LRU: the same ranks, but no request positions (its `insert` takes no
    request context, it has no `on_request_access`): a stored key takes a fresh n, as 0.33 gives
    a key without a position; a touch and a finished request's keys as above."""

    def insert(self, key: Key, rid: int, positions: dict) -> None:
        self.rank[key] = self._fresh()

    def on_request_access(self, rid: int, keys, positions: dict) -> None:
        pass
