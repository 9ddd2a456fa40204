"""The LRU policy of vLLM's CPU offloading manager before 0.31 (`cpu/policies/lru.py`, 0.24-0.30)
as one recency list of the evictable chunks (stored, no load in flight), least recent first.

- A chunk joins the recent end when it becomes evictable: its store completes, or its last
  load completes. A chunk being stored or loaded is on no list (`pin` takes it off).
- `touch(keys)`, last key first: an evictable key moves to the recent end (the first key ends
  most recent); any other key is left alone.
- `evict(n, protected)`: the n least recent outside `protected`, or None (nothing changes).
- No request hooks: a request's accesses and its end change nothing.
"""

from __future__ import annotations

Key = tuple[int, int]


class RecencyLRUPolicy:
    def __init__(self, capacity: int):
        self.clear()

    def clear(self) -> None:
        self.evictable: dict[Key, None] = {}  # insertion order = recency, least recent first

    def insert(self, key: Key, rid: int, positions: dict) -> None:
        pass  # being stored: not evictable yet

    def remove(self, key: Key) -> None:
        self.evictable.pop(key, None)

    def pin(self, key: Key) -> None:
        del self.evictable[key]

    def unpin(self, key: Key) -> None:
        self.evictable[key] = None

    def touch(self, keys, ref) -> None:
        for key in reversed(list(keys)):
            if key in self.evictable:
                del self.evictable[key]
                self.evictable[key] = None

    def evict(self, count: int, protected: set, ref) -> list[Key] | None:
        chosen = [key for key in self.evictable if key not in protected][:count]
        if len(chosen) < count:
            return None
        for key in chosen:
            del self.evictable[key]
        return chosen

    def view(self) -> dict:
        return {"evictable": list(self.evictable)}
