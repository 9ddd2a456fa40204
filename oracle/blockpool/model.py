"""Reference model of vLLM's `BlockPool` (vllm 0.33.0, `vllm/v1/core/block_pool.py`) in plain
lists and dicts: the contract its KV-cache manager relies on, read from the released source.

- Block 0 is the null block: taken off the free queue at construction, never handed out,
  counted free, hashed or freed; `touch` and `free_blocks` skip it.
- The free queue is the eviction order, head first. At the start: blocks 1..n-1 in id order.
  `get_new_blocks(n)`: the first n blocks of the queue, or ValueError when fewer are free
  (nothing changes). Each block taken loses its cache entries (with caching on) and gets one
  reference.
- `touch(blocks)`: one more reference each; a block with none leaves the free queue.
- `free_blocks(blocks)`: one reference fewer per entry (a block named twice with two references
  loses both); those left with none go back to the queue in the order given, each where its last
  reference went: uncached ones (or all, with caching off) to the head, so they are reused
  first; cached ones to the tail, so the cache is evicted least recently used first. A block
  named more times than it has references is a double free, the caller's bug: refused
  (`FreedTooOften`), nothing changes (vLLM's pool does not check: docs/upstream-vllm.md).
- `unpin_blocks(blocks, watcher)`: one reference fewer each, and those left with none go to the
  tail whether cached or not; the watcher hears of each block when `get_new_blocks` hands it out
  or the cache is reset.
- `cache_full_blocks`: blocks[num_cached:num_full] get the hash at their index under the group
  (null blocks, and those the caller's block mask leaves out, skipped). Several blocks may hold one hash (never de-duplicated, so block tables
  stay append-only); a lookup returns the earliest cached of them still cached.
- `evict_blocks(ids)`: those blocks lose their cache entries; references and queue unchanged.
- `reset_prefix_cache()`: False while any block but the null block is held; else every entry
  goes, every watcher hears, True.
"""

from __future__ import annotations

from collections import Counter

REFUSED = "ValueError"  # get_new_blocks asked for more than the free blocks


class FreedTooOften(Exception):
    """free_blocks named a block more times than it has references: the caller's bug, refused."""


class BlockPoolModel:
    def __init__(self, blocks: int, caching: bool):
        self.size, self.caching = blocks, caching
        self.ref = [0] * blocks
        self.key: list[tuple[int, int] | None] = [None] * blocks  # (hash, group) per block
        self.map: dict[tuple[int, int], list[int]] = {}  # (hash, group) -> blocks, oldest first
        self.free = list(range(1, blocks))                # head first; block 0 is the null block
        self.watched: dict[int, None] = {}                # blocks with a reuse watcher, in order
        self.heard: list[int] = []                        # what the watcher heard in this call

    def num_free(self) -> int:
        return len(self.free)

    def get_new_blocks(self, count: int):
        self.heard = []
        if count > len(self.free):
            return REFUSED
        taken, self.free = self.free[:count], self.free[count:]
        for block in taken:
            if block in self.watched:
                del self.watched[block]
                self.heard.append(block)
            if self.caching:
                self._uncache(block)
            self.ref[block] = 1
        return taken

    def touch(self, blocks: list[int]) -> None:
        self.heard = []
        for block in blocks:
            if block == 0:
                continue
            if self.ref[block] == 0:
                self.free.remove(block)
            self.ref[block] += 1

    def free_blocks(self, blocks: list[int]) -> None:
        self.heard = []
        named = Counter(b for b in blocks if b)
        over = [(b, n) for b, n in named.items() if n > self.ref[b]]
        if over:
            block, n = over[0]
            raise FreedTooOften(f"block {block} named {n} times with {self.ref[block]} "
                             f"reference(s)")
        first, last = [], []
        for block in blocks:
            if block == 0:
                continue
            self.ref[block] -= 1
            if self.ref[block] == 0:
                (last if self.caching and self.key[block] is not None else first).append(block)
        self.free = first + self.free + last

    def unpin_blocks(self, blocks: list[int]) -> None:
        self.heard = []
        released = []
        for block in blocks:
            self.ref[block] -= 1
            self.watched.setdefault(block, None)
            if self.ref[block] == 0:
                released.append(block)
        self.free += released

    def cache_full_blocks(self, hashes: list[int], blocks: list[int], num_cached: int,
                          num_full: int, group: int, skip=()) -> None:
        """`skip`: positions in blocks[num_cached:num_full] that stay uncached (the caller's
        block mask), as null blocks do."""
        self.heard = []
        for index in range(num_cached, num_full):
            block = blocks[index]
            if block == 0 or index - num_cached in skip:
                continue
            key = (hashes[index], group)
            self.key[block] = key
            self.map.setdefault(key, []).append(block)

    def get_cached_block(self, block_hash: int, groups: list[int]) -> list[int] | None:
        self.heard = []
        found = []
        for group in groups:
            holders = self.map.get((block_hash, group))
            if not holders:
                return None
            found.append(holders[0])
        return found

    def evict_blocks(self, block_ids: set[int]) -> None:
        self.heard = []
        for block in block_ids:
            self._uncache(block)

    def reset_prefix_cache(self) -> bool:
        self.heard = []
        if len(self.free) != self.size - 1:
            return False
        self.map = {}
        self.key = [None] * self.size
        self.heard, self.watched = list(self.watched), {}
        return True

    def _uncache(self, block: int) -> None:
        key = self.key[block]
        if key is None:
            return
        self.key[block] = None
        holders = self.map[key]
        holders.remove(block)
        if not holders:
            del self.map[key]


def state_violations(size: int, ref: list[int], free: list[int], keys: list,
                     cache: dict[tuple[int, int], list[int]]) -> list[str]:
    """The pool's invariants, whatever the model says: the null block is never free, counted or
    cached; every other block is free exactly when it has no reference; the free queue holds
    each block once; the cache map and the blocks' own hashes agree both ways."""
    problems = []
    queued = set(free)
    if 0 in queued:
        problems.append("the null block (0) is on the free queue")
    if len(queued) != len(free):
        twice = sorted(b for b in queued if free.count(b) > 1)
        problems.append(f"blocks twice on the free queue: {twice[:6]}")
    outside = sorted(b for b in queued if not 0 <= b < size)
    if outside:
        problems.append(f"blocks outside 0..{size - 1} on the free queue: {outside[:6]}")
    negative = [b for b in range(1, size) if ref[b] < 0]
    if negative:
        problems.append(f"negative reference counts: block {negative[0]} has {ref[negative[0]]}")
    lost = [b for b in range(1, size) if ref[b] == 0 and b not in queued]
    if lost:
        problems.append(f"{len(lost)} blocks with no reference are not on the free queue "
                        f"(lost), e.g. {lost[:6]}")
    held = [b for b in range(1, size) if ref[b] > 0 and b in queued]
    if held:
        problems.append(f"{len(held)} blocks with references are on the free queue, e.g. block "
                        f"{held[0]} with {ref[held[0]]}")
    if keys[0] is not None:
        problems.append(f"the null block (0) is cached under {keys[0]}")
    for key, blocks in cache.items():
        strays = [b for b in blocks if not 0 <= b < size or keys[b] != key]
        if strays:
            problems.append(f"the cache maps hash {key[0]} (group {key[1]}) to block {strays[0]}, "
                            f"whose own hash is {keys[strays[0]] if 0 <= strays[0] < size else '?'}")
            break
    for block, key in enumerate(keys):
        if key is not None and block not in cache.get(key, ()):
            problems.append(f"block {block} has hash {key[0]} (group {key[1]}) but the cache does "
                            f"not map it there: it can never be found again")
            break
    return problems
