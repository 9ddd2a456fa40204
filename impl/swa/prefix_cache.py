"""The prefix cache an SWA allocator's reclaim calls are handed (`evict_to_free_tokens`,
`reclaim_for_prealloc`), reduced to what they use: whether it shares prefixes, and
`evict_for_alloc(params)`, which evicts the requests it holds, oldest first, releasing their
slots through the allocator. Plain Python: the driver gives it the allocator's releases, the lock
step the oracle's, so both sides are handed the same cache and differ only in what they ask it.

Its policy (kvfuzz's, not SGLang's tree walk; the allocator's contract is what it asks): for
the full shortfall, whole requests go (`free_full` of the tokens the window passed, `free` of the
rest) until as many tokens were released; for the SWA shortfall, the next requests lose their
window (`free_swa`), the full slots staying cached. A cache that shares no prefix (a chunk
cache) holds nothing and evicts nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Cached:
    """One finished request the cache holds: its full slots out of the window (`dead`) and in it
    (`live`, each with an SWA peer)."""

    rid: int
    dead: list[int]
    live: list[int]


@dataclass
class PrefixCache:
    """`release(method, slots)`: the allocator's `free_full`, `free` or `free_swa` of slots."""

    release: Callable[[str, list[int]], None]
    entries: list[Cached] = field(default_factory=list)
    sharing: bool = True
    asked: list[tuple[int, int]] = field(default_factory=list)  # every evict_for_alloc's ask

    def supports_prefix_sharing(self) -> bool:
        return self.sharing

    def is_chunk_cache(self) -> bool:
        """The same question as SGLang before 0.5.22 asked it (`evict_to_free_tokens`)."""
        return not self.sharing

    def evict_for_alloc(self, params, swa_num_tokens: int | None = None) -> None:
        """`params`: SGLang's `EvictParams` (num_tokens, swa_num_tokens), or the full count
        with the SWA count beside it (the oracle's call)."""
        if swa_num_tokens is None:
            full, swa = int(getattr(params, "num_tokens", 0)), \
                int(getattr(params, "swa_num_tokens", 0))
        else:
            full, swa = int(params), int(swa_num_tokens)
        self.asked.append((full, swa))
        if not self.sharing:
            return
        freed = 0
        while freed < full and self.entries:
            entry = self.entries.pop(0)
            self.release("free_full", entry.dead)
            self.release("free", entry.live)
            freed += len(entry.dead) + len(entry.live)
        freed = 0
        for entry in self.entries:
            if freed >= swa:
                break
            if entry.live:
                self.release("free_swa", entry.live)
                freed += len(entry.live)
                entry.dead, entry.live = entry.dead + entry.live, []
