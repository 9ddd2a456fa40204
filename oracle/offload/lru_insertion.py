"""The LRU policy of vLLM's CPU offloading manager before 0.24 (`cpu/policies/lru.py`,
0.20-0.23: "LRU cache policy backed by a single OrderedDict"), as one list of every chunk in the
cache, least recent first. The manager tells the policy nothing when a chunk's store or load
completes (no `mark_evictable`), so the list moves only by a store and a touch:

- A chunk joins the recent end when its store is prepared (`insert`), being stored.
- `touch(keys)`, last key first: every key in the cache moves to the recent end (the first key
  ends most recent), one being stored or loaded too.
- `evict(n, protected)`: the first n in list order with no transfer in flight (reference count
  0) outside `protected`, or None (nothing changes).
- Loads, completions and a request's end move nothing.
"""

from __future__ import annotations

Key = tuple[int, int]


class InsertionLRUPolicy:
    def __init__(self, capacity: int):
        self.clear()

    def clear(self) -> None:
        self.order: dict[Key, None] = {}  # insertion order = recency, least recent first

    def insert(self, key: Key, rid: int, positions: dict) -> None:
        self.order[key] = None

    def remove(self, key: Key) -> None:
        self.order.pop(key, None)

    def pin(self, key: Key) -> None:
        pass  # a load in flight only keeps the chunk from eviction (the manager's count)

    def unpin(self, key: Key) -> None:
        pass

    def touch(self, keys, ref) -> None:
        for key in reversed(list(keys)):
            if key in self.order:
                del self.order[key]
                self.order[key] = None

    def evict(self, count: int, protected: set, ref) -> list[Key] | None:
        chosen = [key for key in self.order if ref.get(key) == 0 and key not in protected]
        chosen = chosen[:count]
        if len(chosen) < count:
            return None
        for key in chosen:
            del self.order[key]
        return chosen

    def view(self) -> dict:
        return {"order": list(self.order)}
