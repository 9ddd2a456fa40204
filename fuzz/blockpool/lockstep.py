"""The block-pool judge on the shared lock step (`kvfuzz.fuzz.engine.lockstep`): the oracle
(`oracle.blockpool`) and an implementation driven as vLLM's KV-cache manager drives its pool
(requests holding blocks, prefix hits touched, full blocks cached, tables freed tail first),
compared after every op: results (blocks handed out or ValueError, hits, reset's verdict, what
the reuse watcher heard), the number of free blocks, the free queue in eviction order and its
links, every block's reference count and hash, the hash map, and the invariants
(`state_violations`, through `pool_state.pool_problems`).
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.blockpool.pool_state import pool_problems
from kvfuzz.fuzz.engine.lockstep import Call, Lockstep, crash_problems, handles, list_diff, short
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.oracle.blockpool.model import REFUSED, BlockPoolModel, FreedTooOften
from kvfuzz.strategies.blockpool import trace as blockpool
from kvfuzz.strategies.blockpool.trace import (Alloc, Cache, CacheIds, DoubleFree, Evict, Free,
                                               FreeIds, Lookup, Pad, Pin, Probe, Reset, Share,
                                               TouchIds, Unpin, UnpinIds)


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


class BlockPoolLockstep(Lockstep):
    KINDS = blockpool.KINDS
    REJECTIONS = (FreedTooOften,)  # a double free: the implementation must raise too
    EVENTS = ("alloc refused", "alloc exact fit", "alloc ok", "alloc evicts cached",
              "lookup hit", "lookup miss", "share", "touch a free cached block", "cache",
              "cache nothing new", "cache a hash cached elsewhere", "free",
              "free: cached to the tail", "free in order", "free in order: cached to the tail",
              "free a shared block", "unpin", "unpin: cached to the tail",
              "null blocks in a table", "null blocks in a call", "evict cached",
              "evict uncached", "probe", "reset", "reset refused", "touch by id",
              "free by id", "free by id: cached to the tail", "unpin by id", "cache by id",
              "pin", "the same block twice in one call", "double free refused")

    def build_model(self, trace):
        self.holders: dict[int, _Holder] = {}
        self.seen: set[int] = set()  # rids ever used: a finished request never comes back
        return BlockPoolModel(trace.blocks, trace.caching)

    def build_impl(self, trace, cls, device):
        from kvfuzz.impl.blockpool.driver import BlockPoolDriver  # imports vLLM

        return make(BlockPoolDriver, cls, trace.blocks, trace.caching)

    def initial_problems(self):
        return pool_problems(self.impl, self.model, "constructor")

    def state(self, op):
        return pool_problems(self.impl, self.model, "state read")

    def _call(self, method: str, args: tuple) -> Call:
        """A pool call: results compared as `_compare` says, then what the watcher heard."""
        def compare(expected, rejected, actual, raised):
            return _compare(method, expected, rejected, actual, raised) or \
                _heard(self.model.heard, self.impl.heard)
        return Call("", method, args, compare=compare)

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
        if op.rid in self.seen or not self.model.caching:
            return
        found = self._hits(op.hashes, op.group)
        asked = op.hashes[:len(found) + (len(found) < len(op.hashes))]  # up to the first miss
        self.count("lookup hit" if found else "lookup miss")
        self._count_touch(found)
        yield Call(f"lookup r{op.rid}: get_cached_block x{len(asked)}, "
                   f"touch({short(found, 60)})")
        for h in asked:
            yield self._call("get_cached_block", (h, (op.group,)))
        yield from self._touch_starts(op.rid, found)

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
        holder, model = self.holders.get(op.rid), self.model
        if holder is None or not model.caching:
            return
        num_full = min(len(holder.blocks), len(op.hashes))
        if any(model.key[b] is not None for b in holder.blocks[holder.cached:num_full] if b):
            return  # caching a cached block again is partial-block promotion: not here
        self._count_cache(op, holder, num_full)
        yield Call(f"cache_full_blocks(r{op.rid}, num_cached={holder.cached}, "
                   f"num_full={num_full}, group={op.group})")
        yield self._call("cache_full_blocks", (list(op.hashes), list(holder.blocks),
                                               holder.cached, num_full, op.group))
        holder.cached = max(holder.cached, num_full)

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

    # The pool's calls by block id (a live guard's ops): ids outside the pool are dropped.
    def _in_pool(self, ids) -> list[int]:
        return [b for b in ids if b < self.model.size]

    @handles(TouchIds)
    def touch_ids(self, op: TouchIds):
        blocks = self._in_pool(op.block_ids)
        self._count_touch(blocks)
        self.count("touch by id")
        yield Call(f"touch({short(blocks, 60)})")
        yield self._call("touch", (blocks,))

    @handles(FreeIds, UnpinIds)
    def free_ids(self, op):
        model, blocks = self.model, self._in_pool(op.block_ids)
        unpin = isinstance(op, UnpinIds)
        if unpin:
            blocks = [b for b in blocks if b]  # unpin_blocks takes no null block
        counts = Counter(blocks)
        name = "unpin by id" if unpin else "free by id"
        self.count(name)
        if not unpin and any(b and model.key[b] and model.ref[b] == counts[b] for b in counts):
            self.count("free by id: cached to the tail")
        if 0 in counts:
            self.count("null blocks in a call")
        if any(n > 1 for b, n in counts.items() if b):
            self.count("the same block twice in one call")
        method = "unpin_blocks" if unpin else "free_blocks"
        yield Call(f"{method}({short(blocks, 60)})")
        yield self._call(method, (blocks,))

    @handles(CacheIds)
    def cache_ids(self, op: CacheIds):
        model = self.model
        if not model.caching or len(self._in_pool(op.block_ids)) != len(op.block_ids):
            return
        skip = set(op.skip)
        cached = [b for i, b in enumerate(op.block_ids) if b and i not in skip]
        if any(model.key[b] is not None for b in cached):
            return  # caching a cached block again is partial-block promotion: not here
        self.count("cache by id")
        if 0 in op.block_ids:
            self.count("null blocks in a call")
        yield Call(f"cache_full_blocks(blocks {short(list(op.block_ids), 60)}, group={op.group}"
                   f"{f', mask without {sorted(skip)}' if skip else ''})")
        yield self._call("cache_full_blocks", (list(op.hashes), list(op.block_ids), 0,
                                               len(op.block_ids), op.group, tuple(sorted(skip))))

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

    # What the lock step counts (EVENTS): atheris features and the summary grid.
    def _count_alloc(self, n: int) -> None:
        model = self.model
        free = model.num_free()
        self.count("alloc refused" if n > free else "alloc exact fit" if n == free and n
                   else "alloc ok")
        if n <= free and any(model.key[b] for b in model.free[:n]):
            self.count("alloc evicts cached")

    def _count_touch(self, blocks) -> None:
        if any(b and self.model.ref[b] == 0 for b in blocks):
            self.count("touch a free cached block")
        if any(b == 0 for b in blocks):
            self.count("null blocks in a call")

    def _count_cache(self, op, holder, num_full: int) -> None:
        model = self.model
        new = [(h, op.group) for h in op.hashes[holder.cached:num_full]]
        self.count("cache" if new else "cache nothing new")
        if any(key in model.map for key in new):
            self.count("cache a hash cached elsewhere")
        if 0 in holder.blocks[holder.cached:num_full]:
            self.count("null blocks in a call")

    def _count_free(self, op, blocks) -> None:
        model = self.model
        counts = Counter(blocks)
        released = [b for b in counts if b and model.ref[b] == counts[b]]
        name = "unpin" if isinstance(op, Unpin) else "free in order" if not op.reverse else "free"
        self.count(name)
        if any(model.key[b] for b in released):
            self.count(f"{name}: cached to the tail")
        if len(released) < len([b for b in counts if b]):
            self.count("free a shared block")
        if any(n > 1 for b, n in counts.items() if b):
            self.count("the same block twice in one call")
        if 0 in counts:
            self.count("null blocks in a call")


def _compare(method: str, expected, rejected, actual, raised) -> list[tuple[str, str]]:
    if rejected is not None:  # any exception refuses it; the state read shows it changed nothing
        return [] if raised is not None else [
            ("double free", f"{method} accepted a caller's double free ({rejected}): expected it "
                            f"refused (raised) with nothing changed")]
    if expected == REFUSED:
        if raised is None:
            return [("None vs success", f"expected ValueError (more blocks asked for than are "
                                        f"free), actual {short(actual)}")]
        if not isinstance(raised, ValueError):
            return crash_problems(raised)
        return []
    if method == "get_new_blocks" and isinstance(raised, ValueError):  # refused: not a crash
        return [("None vs success", f"expected blocks {short(expected)}, actual ValueError: "
                                    f"{short(str(raised))}")]
    if raised is not None:
        return crash_problems(raised)
    if expected == actual:
        return []
    if isinstance(expected, list) and isinstance(actual, list):
        return [("result", f"{method}: {list_diff(expected, actual)}")]
    return [("result", f"{method}: expected {short(expected)}, actual {short(actual)}")]


def _heard(expected: list[int], actual: list[int]) -> list[tuple[str, str]]:
    if sorted(expected) == sorted(actual):
        return []
    return [("reuse watcher", f"expected to hear of blocks {sorted(expected)}, heard of "
                              f"{sorted(actual)}")]
