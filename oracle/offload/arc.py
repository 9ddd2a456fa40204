"""The ARC policy of vLLM's CPU offloading manager (vllm 0.33.0, `cpu/policies/arc.py`) in four
plain lists, least recent first: T1 (chunks seen once), T2 (reused), and the ghosts B1, B2 (keys
evicted from T1, T2), with an adaptive target size for T1.

- `insert`: to the end of T1, out of the ghosts.
- A ghost hit (a store miss of a ghost key, or a touch of one): a B1 key raises the target by
  max(1, |B2| / |B1|), at most the capacity; a B2 key lowers it by max(1, |B1| / |B2|), at least
  0; the key goes to the end of its ghost list. A store miss looks at its keys last first.
- `touch(keys)`, last key first: a T1 key moves to the end of T2 if stored, to the end of T1 if
  still being stored; a T2 key to the end of T2; anything else is a ghost hit (or nothing).
- A finished request, its keys in head-to-tail order taken last first: a key it only inserted
  moves to the end of its list; a key it reused (loaded, or offered while stored) moves to the
  end of T2 (from T1 or T2).
- `evict(n, protected)`: n times, from T1 while T1 (counting what this call took) is at least
  int(target), else from T2, else from T1; always the least recent chunk with no transfer in
  flight outside `protected`, never one passed over again. Fewer than n: None, nothing changes.
  Evicted keys go to the end of B1 or B2; then each ghost list keeps its last `capacity` keys.
"""

from __future__ import annotations

Key = tuple[int, int]


class ARCPolicy:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.clear()

    def clear(self) -> None:
        self.t1: list[Key] = []
        self.t2: list[Key] = []
        self.b1: list[Key] = []
        self.b2: list[Key] = []
        self.target = 0.0

    def insert(self, key: Key, rid: int, positions: dict) -> None:
        self.t1.append(key)
        _drop(self.b1, key)
        _drop(self.b2, key)

    def remove(self, key: Key) -> None:
        _drop(self.t1, key) or _drop(self.t2, key)

    def pin(self, key: Key) -> None:
        pass  # eviction reads the reference count itself

    unpin = pin

    def _ghost_hit(self, key: Key) -> None:
        if key in self.b1:
            self.target = min(self.target + max(1, len(self.b2) / len(self.b1)), self.capacity)
            _to_end(self.b1, key)
        elif key in self.b2:
            self.target = max(self.target - max(1, len(self.b1) / len(self.b2)), 0)
            _to_end(self.b2, key)

    def on_store_miss(self, keys, ref) -> None:
        for key in reversed(list(keys)):
            self._ghost_hit(key)

    def touch(self, keys, ref) -> None:
        for key in reversed(list(keys)):
            if key in self.t1:
                _drop(self.t1, key)
                (self.t1 if ref[key] < 0 else self.t2).append(key)
            elif key in self.t2:
                _to_end(self.t2, key)
            else:
                self._ghost_hit(key)

    def on_request_access(self, rid: int, keys, positions: dict) -> None:
        pass

    def on_request_finished(self, ordered, inserted_only, reused, ref) -> None:
        for key in reversed(ordered):
            if key in inserted_only:
                _to_end(self.t1, key) or _to_end(self.t2, key)
            elif key in reused and (_drop(self.t1, key) or _drop(self.t2, key)):
                self.t2.append(key)

    def evict(self, count: int, protected: set, ref) -> list[Key] | None:
        def candidates(keys):
            return iter([key for key in keys if ref[key] == 0 and key not in protected])

        from_t1, from_t2 = candidates(self.t1), candidates(self.t2)
        t1_size, chosen = len(self.t1), []
        for _ in range(count):
            key = next(from_t1, None) if t1_size >= int(self.target) else None
            if key is None:
                key = next(from_t2, None)
            if key is None:
                key = next(from_t1, None)
            if key is None:
                return None
            where = 2 if key in self.t2 else 1
            t1_size -= where == 1
            chosen.append((key, where))
        for key, where in chosen:
            _drop(self.t1 if where == 1 else self.t2, key)
            (self.b1 if where == 1 else self.b2).append(key)
        del self.b1[:max(0, len(self.b1) - self.capacity)]
        del self.b2[:max(0, len(self.b2) - self.capacity)]
        return [key for key, _ in chosen]

    def view(self) -> dict:
        return {"t1": list(self.t1), "t2": list(self.t2), "b1": list(self.b1),
                "b2": list(self.b2), "target": self.target}


def _drop(keys: list, key) -> bool:
    """Takes `key` out of `keys`; whether it was there."""
    if key in keys:
        keys.remove(key)
        return True
    return False


def _to_end(keys: list, key) -> bool:
    """Moves `key` to the end of `keys` if it is there; whether it was."""
    return _drop(keys, key) and (keys.append(key) or True)
