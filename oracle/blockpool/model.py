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
- Entries: a block has at most one primary entry (hash, group), with the number of prefix tokens
  it covers, and any number of extra ones (partial entries); the map lists under each entry the
  blocks that hold it, oldest first. Several blocks may hold one hash (never de-duplicated, so
  block tables stay append-only); a lookup returns the earliest still cached. A block that
  loses its entries loses all of them (each one `Removed`, `events.py`).
- `cache_full_blocks`: blocks[num_cached:num_full] get their block's hash (the hash of its last
  hash unit) under the group, covering (index + 1) x block size tokens (null blocks, and those
  the caller's block mask leaves out, skipped); a block holding a shorter entry (a partial one)
  is promoted: its entries go first.
- `cache_partial_block(block, units)`: the entry of the first `units` hash units, covering that
  many units' tokens, on `block` (the null block: None, nothing); with `replace`, the block's
  entries go first; else a block whose primary entry covers fewer tokens drops its entries
  first (a longer prefix now); an entry the block already holds is not added twice (and not
  published). The entry goes in as primary where the block has none, else as an extra one.
- `move_block_hashes(src, dst)`: every entry of `src` moves to `dst` (which has none), the
  primary one first with its token count; nothing is published.
- `evict_blocks(ids)`: those blocks lose their entries; references and queue unchanged.
- `reset_prefix_cache()`: False while any block but the null block is held; else every entry
  goes, every watcher hears, `Cleared` is published, True.
- `get_usage()`: 1 - free / (blocks - 1) (0 for a pool of the null block alone);
  `is_block_writable(b)`: not null, one reference, no primary entry.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.oracle.blockpool import events as ev
from kvfuzz.strategies.blockpool.events import Prompt

REFUSED = "ValueError"  # get_new_blocks asked for more than the free blocks


class FreedTooOften(Exception):
    """free_blocks named a block more times than it has references: the caller's bug, refused."""


def released(queue: list[int], ref: list[int], blocks, cached) -> list[int]:
    """The free queue after `free_blocks(blocks)`: one reference fewer per block named (`ref`,
    changed in place; the null block skipped); those left with none go back in one batch each
    way, in the order given: uncached ones before the head (reused first), cached ones
    (`cached(block)`) after the tail (evicted least recently used first)."""
    first, last = [], []
    for block in blocks:
        if block == 0:
            continue
        ref[block] -= 1
        if ref[block] == 0:
            (last if cached(block) else first).append(block)
    return first + queue + last


class BlockPoolModel:
    """`hash_block_size`: tokens per hash unit; `events`: KV events published (until taken,
    `take_events`); `lookahead`: tokens after a block its hash covers (events carry them);
    `metrics`: a residency collector sampling every block (`self.tracked`; its evictions until
    taken, `take_evictions`)."""

    def __init__(self, blocks: int, caching: bool, hash_block_size: int = 16,
                 events: bool = False, lookahead: int = 0, metrics: bool = False):
        self.size, self.caching, self.h = blocks, caching, hash_block_size
        self.publishes, self.lookahead, self.metrics = events, lookahead, metrics
        # Residency metrics: each tracked block's accesses (the collector keeps the last 4),
        # and the reuse gaps (accesses - 1) of each block the call stopped tracking.
        self.tracked: dict[int, int] = {}
        self.evictions: list[int] = []
        self.ref = [0] * blocks
        self.key: list[tuple[int, int] | None] = [None] * blocks  # primary (hash, group)
        self.tokens: list[int | None] = [None] * blocks           # what the primary covers
        self.extra: list[list] = [[] for _ in range(blocks)]      # further entries, in order
        self.map: dict[tuple[int, int], list[int]] = {}  # (hash, group) -> blocks, oldest first
        self.free = list(range(1, blocks))                # head first; block 0 is the null block
        self.watched: dict[int, None] = {}                # blocks with a reuse watcher, in order
        self.heard: list[int] = []                        # what the watcher heard in this call
        self.events: list = []                            # published, not taken yet

    def _call(self) -> None:
        self.heard = []

    def take_events(self) -> list:
        """The KV events published since the last take (vLLM's queue, drained)."""
        events, self.events = self.events, []
        return events

    def take_evictions(self) -> list[int]:
        """The reuse gaps of each block the metrics collector stopped tracking since the last
        take (its eviction events, drained)."""
        evictions, self.evictions = self.evictions, []
        return evictions

    def num_free(self) -> int:
        return len(self.free)

    def get_usage(self) -> float:
        total = self.size - 1
        return 1.0 - len(self.free) / total if total else 0

    def writable(self) -> list[int]:
        return [b for b in range(1, self.size) if self.ref[b] == 1 and self.key[b] is None]

    def entries(self, block: int):
        """A block's entries as a reader shows them: None, the primary, or [primary, *extra]."""
        extra = self.extra[block]
        return [self.key[block], *sorted(extra)] if extra else self.key[block]

    def get_new_blocks(self, count: int):
        self._call()
        if count > len(self.free):
            return REFUSED
        taken, self.free = self.free[:count], self.free[count:]
        for block in taken:
            if block in self.watched:
                del self.watched[block]
                self.heard.append(block)
        for block in taken:
            if self.caching:
                self._uncache(block)
            self.ref[block] = 1
            self._track(block, allocated=True)
        return taken

    def touch(self, blocks: list[int]) -> None:
        self._call()
        for block in blocks:
            if block == 0:
                continue
            if self.ref[block] == 0:
                self.free.remove(block)
            self.ref[block] += 1
            if block in self.tracked:
                self.tracked[block] = min(4, self.tracked[block] + 1)

    def free_blocks(self, blocks: list[int]) -> None:
        self._call()
        named = Counter(b for b in blocks if b)
        over = [(b, n) for b, n in named.items() if n > self.ref[b]]
        if over:
            block, n = over[0]
            raise FreedTooOften(f"block {block} named {n} times with {self.ref[block]} "
                                f"reference(s)")
        self.free = released(self.free, self.ref, blocks,
                             lambda block: self.caching and self.key[block] is not None)

    def unpin_blocks(self, blocks: list[int]) -> None:
        self._call()
        released = []
        for block in blocks:
            self.ref[block] -= 1
            self.watched.setdefault(block, None)
            if self.ref[block] == 0:
                released.append(block)
        self.free += released

    def cache_full_blocks(self, prompt: Prompt, blocks: list[int], num_cached: int,
                          num_full: int, group: int, block_size: int, skip=()) -> None:
        """`skip`: positions in blocks[num_cached:num_full] that stay uncached (the caller's
        block mask), as null blocks do."""
        self._call()
        hashes = ev.block_hashes(prompt, block_size // self.h)
        starts, cached = [], []
        for index in range(num_cached, num_full):
            block = blocks[index]
            if block == 0 or index - num_cached in skip:
                continue
            if self.key[block] is not None:  # a partial block now full: promoted
                self._uncache(block)
            self._insert((hashes[index], group), block, (index + 1) * block_size)
            starts.append(index * block_size)
            cached.append(hashes[index])
        if self.publishes and num_cached < num_full:
            parent = hashes[num_cached - 1] if num_cached else None
            self.events.append(ev.stored(prompt, cached, parent, num_cached * block_size,
                                         num_full * block_size, block_size, group, starts,
                                         self.lookahead))

    def cache_partial_block(self, prompt: Prompt, block: int, units: int, group: int,
                            block_size: int, replace: bool = False):
        """`block_size`: the group's, a multiple of the hash block size; the entry does not
        depend on it."""
        self._call()
        if block == 0:
            return None
        key, tokens = (prompt.hashes[units - 1], group), units * self.h
        already = self.key[block] == key or block in self.map.get(key, ())
        if replace:
            self._uncache(block)
            already = False
        elif not already and self.key[block] is not None and self.tokens[block] < tokens:
            self._uncache(block)
        self._insert(key, block, tokens)
        if self.publishes and not already:
            start = tokens - self.h
            parent = prompt.hashes[units - 2] if units > 1 else None
            self.events.append(ev.stored(prompt, [key[0]], parent, start, tokens, self.h, group,
                                         [start], self.lookahead))
        return key

    def emit_cached_block_events(self, prompt: Prompt, num_blocks: int, block_size: int,
                                 group: int) -> None:
        self._call()
        if not self.publishes or num_blocks == 0:
            return
        hashes = ev.block_hashes(prompt, block_size // self.h)[:num_blocks]
        starts = [i * block_size for i in range(num_blocks)]
        self.events.append(ev.stored(prompt, hashes, None, 0, num_blocks * block_size,
                                     block_size, group, starts, self.lookahead))

    def move_block_hashes(self, src: int, dst: int) -> None:
        self._call()
        tokens = self.tokens[src]
        for key in self._remove_entries(src):
            self._insert(key, dst, tokens)

    def get_cached_block(self, block_hash: int, groups: list[int]) -> list[int] | None:
        self._call()
        found = []
        for group in groups:
            holders = self.map.get((block_hash, group))
            if not holders:
                return None
            found.append(holders[0])
        return found

    def evict_blocks(self, block_ids: set[int]) -> None:
        self._call()
        for block in block_ids:
            self._uncache(block)
            self._track(block)

    def reset_prefix_cache(self) -> bool:
        self._call()
        if len(self.free) != self.size - 1:
            return False
        self.map = {}
        self.key, self.tokens = [None] * self.size, [None] * self.size
        self.extra = [[] for _ in range(self.size)]
        self.heard, self.watched = list(self.watched), {}
        self.tracked = {}
        if self.publishes:
            self.events.append(ev.cleared())
        return True

    def _insert(self, key: tuple[int, int], block: int, tokens: int | None) -> None:
        if self.key[block] == key or block in self.map.get(key, ()):
            return
        if self.key[block] is None:
            self.key[block], self.tokens[block] = key, tokens
        else:
            self.extra[block].append(key)
        self.map.setdefault(key, []).append(block)

    def _remove_entries(self, block: int) -> list[tuple[int, int]]:
        """Every entry of `block` out of the map (the primary first); those that were there."""
        keys = ([self.key[block]] if self.key[block] is not None else []) + self.extra[block]
        self.key[block], self.tokens[block], self.extra[block] = None, None, []
        gone = []
        for key in keys:
            holders = self.map.get(key, [])
            if block in holders:
                holders.remove(block)
                gone.append(key)
                if not holders:
                    del self.map[key]
        return gone

    def _track(self, block: int, allocated: bool = False) -> None:
        """A block's metrics: an eviction (with caching on, every block handed out is evicted
        first) ends its tracking, with its reuse gaps; an allocation starts it afresh."""
        if not self.metrics:
            return
        if self.caching or not allocated:
            accesses = self.tracked.pop(block, None)
            if accesses is not None:
                self.evictions.append(max(0, accesses - 1))
        if allocated:
            self.tracked[block] = 0  # accesses are the touches after it

    def _uncache(self, block: int) -> None:
        """Every entry of `block` goes, each one published as removed."""
        for key in self._remove_entries(block):
            if self.publishes:
                self.events.append(ev.removed(key))
