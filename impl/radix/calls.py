"""The calls the radix driver makes into a prefix cache, as SGLang 0.5.22 on has them (`lock`,
`unlock`, `checkpoint`, `free_kv_row`, `touch_prefix`); `legacy.py` maps the same calls onto
the API of the releases before (`calls_for` picks by what the installed class has)."""

from __future__ import annotations

# What 0.5.22's scheduler calls on the cache; a class without all of them is driven by legacy.py.
CURRENT_CALLS = ("lock", "unlock", "checkpoint", "touch_prefix", "free_kv_row")


def current(obj) -> bool:
    """Whether a cache (class or instance) has today's calls: the one test of which contract
    and which calls a release gets (legacy.py)."""
    return all(callable(getattr(obj, name, None)) for name in CURRENT_CALLS)


class Calls:
    def __init__(self, cache, allocator, rows):
        self.cache, self.allocator, self.rows = cache, allocator, rows

    def lock(self, node):
        return self.cache.lock(node)

    def unlock(self, lock) -> None:
        self.cache.unlock(lock)

    def checkpoint(self, request, finishing: bool) -> int:
        """`checkpoint(req, up_to=filled)` (at a chunk boundary and on finish alike); the new
        `cache_protected_len`."""
        self.cache.checkpoint(request, up_to=request.filled)
        return int(request.kv.cache_protected_len)

    def release(self, request) -> None:
        """The request's own slots freed (`free_kv_row`), its lock dropped."""
        self.cache.free_kv_row(request.kv, [(request.kv.cache_protected_len, request.filled)])
        self.unlock(request.lock)

    def touch(self, key, match_params) -> None:
        self.cache.touch_prefix(key)
