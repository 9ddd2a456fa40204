"""The block-pool judge on the shared lock step (`kvfuzz.fuzz.engine.lockstep`): the oracle
(`oracle.blockpool`) and an implementation driven as vLLM's KV-cache manager drives its pool
(requests holding blocks, prefix hits touched, full blocks cached, partial entries and their
copies, tables freed tail first). This module holds the op handlers and the holders they keep;
each call's result (blocks handed out or ValueError, hits, reset's verdict, what the reuse
watcher heard, the KV events each call published) is compared in `calls.py`; after every op the
state read (`pool_state.pool_problems`) compares the number of free blocks, usage, the free queue
in eviction order and its links, every block's reference count, entries and the tokens they
cover, the writable blocks, the hash map, and the invariants (`state_violations`; what a
consumer of the KV events believes, `event_violations`). What the ops reach is counted in
`counts.py`; the ops that name blocks by id (a live guard's) are `by_id.py`'s.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.blockpool.by_id import ByIdOps
from kvfuzz.fuzz.blockpool.calls import PoolCalls
from kvfuzz.fuzz.blockpool.counts import CONFIGS, PoolCounts
from kvfuzz.fuzz.blockpool.pool_state import pool_problems
from kvfuzz.fuzz.engine.lockstep import Call, Lockstep, handles, short
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.oracle.blockpool.model import REFUSED, BlockPoolModel, FreedTooOften
from kvfuzz.strategies.blockpool import trace as blockpool
from kvfuzz.strategies.blockpool.events import Prompt
from kvfuzz.strategies.blockpool.trace import (Alloc, Cache, CachePartial, DoubleFree, Evict,
                                               Free, Lookup, Move, Pad, Pin, Probe, Reset,
                                               Share, Unpin)


class _Holder:
    """A request as the pool sees it: its table (null blocks included), how many of its
    leading blocks are cached (the manager's num_cached_block), and the blocks pinned once more
    (`Pin`), released with the table."""

    def __init__(self, blocks=(), cached: int = 0):
        self.blocks, self.cached = list(blocks), cached
        self.pinned: list[int] = []

    def releases(self, reverse: bool = True) -> list[int]:
        """What freeing the holder names: its table (tail first, or in order), then its pins."""
        return (self.blocks[::-1] if reverse else list(self.blocks)) + self.pinned


class BlockPoolLockstep(ByIdOps, PoolCalls, PoolCounts, Lockstep):
    KINDS = blockpool.KINDS
    REJECTIONS = (FreedTooOften,)  # a double free: the implementation must raise too
    EVENTS = PoolCounts.EVENTS  # what the counters count (counts.py)

    def build_model(self, trace):
        self.holders: dict[int, _Holder] = {}
        self.seen: set[int] = set()  # rids ever used: a finished request never comes back
        self.view = Counter()  # what a consumer of the implementation's KV events believes
        for name, applies in CONFIGS.items():
            if applies(trace):
                self.count(f"config: {name}")
        return BlockPoolModel(trace.blocks, trace.caching, trace.hash_block_size, trace.events,
                              trace.lookahead, trace.metrics)

    def build_impl(self, trace, cls, device):
        from kvfuzz.impl.blockpool.driver import BlockPoolDriver  # imports vLLM

        return make(BlockPoolDriver, cls, trace.blocks, trace.caching, trace.hash_block_size,
                    trace.events, trace.lookahead, trace.metrics)

    def initial_problems(self):
        return pool_problems(self.impl, self.model, "constructor", self._view(), lock=self)

    def state(self, op):
        return pool_problems(self.impl, self.model, "state read", self._view(), lock=self)

    def _view(self):
        return self.view if self.trace.events else None

    def _prompt(self, hashes) -> Prompt:
        """A request with these hashes: its tokens are its hashes, each a hash block's worth."""
        size = self.trace.hash_block_size
        return Prompt(tuple(hashes), tuple(h for h in hashes for _ in range(size)),
                      self.trace.salt, self.trace.images)

    def _startable(self, rid: int) -> bool:
        return rid in self.holders or rid not in self.seen

    @handles(Alloc)
    def alloc(self, op: Alloc):
        if not self._startable(op.rid):
            return
        n = max(0, self.model.num_free() + op.count) if op.relative else op.count
        self._count_alloc(n)
        yield Call(f"get_new_blocks({n}) for r{op.rid}")
        got = (yield self._call("get_new_blocks", (n,))).expected
        if got != REFUSED:
            self._holder(op.rid).blocks.extend(got)

    @handles(Lookup)
    def lookup(self, op: Lookup):
        """As full attention looks up (`FullAttentionManager.find_longest_cache_hit`): each
        block's hash up to the first miss, then (blocks of several hash units) the unit
        boundaries inside the next block, latest first, up to the first hit."""
        if op.rid in self.seen or not self.model.caching:
            return
        scale = self.trace.scale
        full = self._hits(op.hashes[scale - 1::scale], op.group)
        asked = op.hashes[scale - 1::scale][:len(full) + 1]  # up to the first miss
        first = len(full) * scale
        inside = op.hashes[first:min(first + scale - 1, len(op.hashes))][::-1]
        partial = []
        for index, h in enumerate(inside):
            partial = self._hits([h], op.group)
            if partial:
                inside = inside[:index + 1]
                break
        found = full + partial
        self.count("lookup hit" if full else "lookup miss")
        if partial:
            self.count("lookup partial hit")
        self._count_touch(found)
        yield Call(f"lookup r{op.rid}: get_cached_block x{len(asked) + len(inside)}, "
                   f"touch({short(found, 60)})")
        for h in list(asked) + list(inside):
            yield self._call("get_cached_block", (h, (op.group,)))
        yield self._call("touch", (found,))
        holder = self._holder(op.rid)
        holder.blocks, holder.cached = list(found), len(full)
        if self.trace.report:  # as the manager reports a hit (of whole blocks; none: nothing)
            self.count("hit reported")
            yield self._call("emit_cached_block_events", (self._prompt(op.hashes), len(full),
                                                          self.trace.block_size, op.group))

    @handles(Share)
    def share(self, op: Share):
        src = self.holders.get(op.src)
        if op.rid in self.seen or src is None:
            return
        shared = src.blocks[:min(op.count, src.cached)]
        self._count_touch(shared)
        self.count("share")
        yield Call(f"r{op.rid} shares r{op.src}: touch({short(shared, 60)})")
        yield from self._touch_starts(op.rid, shared)

    def _touch_starts(self, rid: int, blocks: list[int]):
        """A touch that starts holder `rid` with `blocks`, all counted cached."""
        yield self._call("touch", (blocks,))
        holder = self._holder(rid)
        holder.blocks, holder.cached = list(blocks), len(blocks)

    @handles(Pad)
    def pad(self, op: Pad):
        if not self._startable(op.rid):
            return
        self._holder(op.rid).blocks.extend([0] * op.count)  # no call: the table alone changes
        self.count("null blocks in a table")
        yield Call(f"r{op.rid} table += {op.count} null blocks")

    @handles(Cache)
    def cache(self, op: Cache):
        holder, model, size = self.holders.get(op.rid), self.model, self.trace.block_size
        if holder is None or not model.caching:
            return
        num_full = min(len(holder.blocks), len(op.hashes) // self.trace.scale)
        skip = tuple(sorted({i for i in op.skip if i < num_full - holder.cached}))
        new = [i for i in range(holder.cached, num_full) if i - holder.cached not in skip]
        if any(model.key[holder.blocks[i]] is not None
               and model.tokens[holder.blocks[i]] >= (i + 1) * size
               for i in new if holder.blocks[i]):
            return  # caching a block again: only a shorter (partial) entry may be promoted
        self._count_cache(op, holder, num_full)
        if skip:
            self.count("cache with a block mask")
        yield Call(f"cache_full_blocks(r{op.rid}, num_cached={holder.cached}, "
                   f"num_full={num_full}, group={op.group}"
                   f"{f', mask without {list(skip)}' if skip else ''})")
        yield self._call("cache_full_blocks", (self._prompt(op.hashes), list(holder.blocks),
                                               holder.cached, num_full, op.group, size, skip))
        holder.cached = max(holder.cached, num_full)

    @handles(CachePartial)
    def cache_partial(self, op: CachePartial):
        """As full attention registers a prompt tail inside a block (`_cache_partial_tail_
        block`): the entry of the first `units` hash units on the block holding their end."""
        holder, model, scale = self.holders.get(op.rid), self.model, self.trace.scale
        index = (op.units - 1) // scale
        if holder is None or not model.caching or not 1 <= op.units <= len(op.hashes) or \
                index >= len(holder.blocks):
            return
        block, key = holder.blocks[index], (op.hashes[op.units - 1], op.group)
        tokens = op.units * self.trace.hash_block_size
        self._count_partial(op, block, key, tokens)
        yield Call(f"cache_partial_block(r{op.rid}'s block {index}: {block}, "
                   f"{tokens} tokens, group={op.group}{', replace' if op.replace else ''})")
        yield self._call("cache_partial_block", (self._prompt(op.hashes), block, op.units,
                                                 op.group, self.trace.block_size, op.replace))

    @handles(Move)
    def move(self, op: Move):
        """Copy-on-write: a new block for `dst`, and `rid`'s block's entries moved onto it."""
        holder, model = self.holders.get(op.rid), self.model
        if holder is None or not 0 <= op.index < len(holder.blocks) or \
                not holder.blocks[op.index] or not model.num_free() or \
                not self._startable(op.dst) or op.dst == op.rid:
            return
        src = holder.blocks[op.index]
        self.count("move entries to a copy")
        yield Call(f"move r{op.rid}'s block {src}: get_new_blocks(1) for r{op.dst}, "
                   f"move_block_hashes")
        copy = (yield self._call("get_new_blocks", (1,))).expected
        target = self._holder(op.dst)
        target.blocks, target.cached = list(copy), 1  # the copy is cached: never cached again
        yield self._call("move_block_hashes", (src, copy[0]))

    @handles(Free, Unpin)
    def free(self, op):
        """Free and Unpin: one call over every live holder's blocks; the holders are gone."""
        live = [r for r in dict.fromkeys(op.rids) if r in self.holders]
        if not live:
            return
        blocks = []
        for rid in live:
            blocks += self.holders[rid].releases(not isinstance(op, Free) or op.reverse)
        if isinstance(op, Unpin):
            blocks = [b for b in blocks if b]  # unpin_blocks takes no null block
        self._count_free(op, blocks)
        method = "free_blocks" if isinstance(op, Free) else "unpin_blocks"
        yield Call(f"{method}({short(blocks, 60)})")
        yield self._call(method, (blocks,))
        for rid in live:
            del self.holders[rid]

    @handles(Pin)
    def pin(self, op: Pin):
        holder = self.holders.get(op.rid)
        blocks = [b for b in holder.blocks if b] if holder else []
        if not blocks:
            return
        self.count("pin")
        yield Call(f"pin r{op.rid}: touch({short(blocks, 60)})")
        yield self._call("touch", (blocks,))
        holder.pinned += blocks[::-1]

    @handles(DoubleFree)
    def double_free(self, op: DoubleFree):
        """The holder's blocks and its tail block once more: refused, the holder stays live."""
        holder = self.holders.get(op.rid)
        blocks = holder.releases() if holder else []
        tail = next((b for b in blocks if b), None)
        if tail is None or self.model.ref[tail] != blocks.count(tail):
            return  # nothing to free, or the tail is shared: one more entry would be legal
        blocks.append(tail)
        self.count("double free refused")
        yield Call(f"free_blocks({short(blocks, 60)}): block {tail} named "
                   f"{blocks.count(tail)} times, {self.model.ref[tail]} reference(s)")
        yield self._call("free_blocks", (blocks,))

    @handles(Evict)
    def evict(self, op: Evict):
        model = self.model
        ids = sorted({b for b in op.block_ids if b < model.size})
        self.count("evict cached" if any(model.key[b] for b in ids) else "evict uncached")
        yield Call(f"evict_blocks({set(ids) or '{}'})")
        yield self._call("evict_blocks", (ids,))

    @handles(Probe)
    def probe(self, op: Probe):
        self.count("probe")
        yield Call(f"get_cached_block x{len(op.hashes)}, groups {list(op.groups)}")
        for h in op.hashes:
            yield self._call("get_cached_block", (h, tuple(op.groups)))

    @handles(Reset)
    def reset(self, op: Reset):
        model = self.model
        self.count("reset refused" if model.num_free() != model.size - 1 else "reset")
        yield Call("reset_prefix_cache()")
        yield self._call("reset_prefix_cache", ())

    def _holder(self, rid: int) -> _Holder:
        self.seen.add(rid)
        return self.holders.setdefault(rid, _Holder())

    def _hits(self, hashes, group) -> list[int]:
        found = []
        for h in hashes:
            holders = self.model.map.get((h, group))
            if not holders:
                break
            found.append(holders[0])
        return found
