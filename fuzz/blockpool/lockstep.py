"""Stateful differential for block pools: drives the oracle (`oracle.blockpool`) and an
implementation with the same trace, as vLLM's KV-cache manager does (requests holding blocks,
prefix hits touched, full blocks cached, tables freed tail first), and compares after every op:
results (blocks handed out or ValueError, hits, reset's verdict, what the reuse watcher heard),
the number of free blocks, the free queue in eviction order and its links, every block's
reference count and hash, the hash map, and the invariants (`state_violations`). Every call
into the implementation is guarded: whatever it raises is a problem to report.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.blockpool.pool_state import pool_problems
from kvfuzz.fuzz.lockstep_calls import crash_problems, guarded, list_diff, short
from kvfuzz.impl.blockpool.driver import BlockPoolDriver
from kvfuzz.oracle.blockpool.model import REFUSED, BlockPoolModel
from kvfuzz.strategies.blockpool.trace import (Alloc, Cache, Evict, Free, Lookup, Pad, Probe,
                                               Reset, Share, Trace, Unpin)


class _Holder:
    """A request as the pool sees it: its table (null blocks included) and how many of its
    leading blocks are cached (the manager's num_cached_block)."""

    def __init__(self, blocks=(), cached: int = 0):
        self.blocks, self.cached = list(blocks), cached


class Lockstep:
    """The oracle and one implementation side by side; `step(op)` returns the problems found."""

    def __init__(self, trace: Trace, cls, device: str = "cpu"):
        self.model = BlockPoolModel(trace.blocks, trace.caching)
        self.holders: dict[int, _Holder] = {}
        self.seen: set[int] = set()  # rids ever used: a finished request never comes back
        self.log: list[str] = []
        self.events: Counter = Counter()
        self.impl, raised = guarded(BlockPoolDriver, cls, trace.blocks, trace.caching)
        self.broken = crash_problems(raised, "constructor") if raised else []
        if not self.broken:
            self.broken = self._state("constructor")

    def step(self, op) -> tuple[str | None, list[tuple[str, str]]]:
        """(the call `op` stood for, or None when it resolved to nothing; the problems)."""
        if self.broken:
            return None, self.broken
        call = self._resolve(op)
        if call is None:
            return None, []
        calls, text, commit = call
        problems = []
        for method, args in calls:
            expected = getattr(self.model, method)(*args)
            actual, raised = guarded(getattr(self.impl, method), *args)
            problems += _compare(method, expected, actual, raised)
            if not problems:
                problems += _heard(self.model.heard, self.impl.heard)
            if problems:
                break
            commit(method, expected)
        self.log.append(text)
        return text, problems or self._state("state read")

    def _resolve(self, op):
        """([(method, args)...], text, commit(method, result)), or None when `op` resolves to
        nothing (its holder is gone, or already exists for an op that starts one)."""
        return getattr(self, f"_{type(op).__name__.lower()}")(op)

    def _startable(self, rid: int) -> bool:
        return rid in self.holders or rid not in self.seen

    def _alloc(self, op: Alloc):
        if not self._startable(op.rid):
            return None
        n = max(0, self.model.num_free() + op.count) if op.relative else op.count
        self._count_alloc(n)

        def commit(_, got):
            if got != REFUSED:
                self._holder(op.rid).blocks.extend(got)
        return [("get_new_blocks", (n,))], f"get_new_blocks({n}) for r{op.rid}", commit

    def _lookup(self, op: Lookup):
        if op.rid in self.seen or not self.model.caching:
            return None
        found = self._hits(op.hashes, op.group)
        calls = [("get_cached_block", (h, (op.group,))) for h in op.hashes]
        calls = calls[:len(found) + (len(found) < len(op.hashes))]  # up to the first miss
        calls.append(("touch", (found,)))
        self.events["lookup hit" if found else "lookup miss"] += 1
        self._count_touch(found)
        return calls, (f"lookup r{op.rid}: get_cached_block x{len(calls) - 1}, "
                       f"touch({short(found, 60)})"), self._starts(op.rid, found)

    def _share(self, op: Share):
        src = self.holders.get(op.src)
        if op.rid in self.seen or src is None:
            return None
        shared = src.blocks[:min(op.count, src.cached)]
        self._count_touch(shared)
        self.events["share"] += 1
        return [("touch", (shared,))], f"r{op.rid} shares r{op.src}: touch({short(shared, 60)})", \
            self._starts(op.rid, shared)

    def _starts(self, rid: int, blocks: list[int]):
        """The commit of a touch that starts holder `rid` with `blocks`, all counted cached."""
        def commit(method, _):
            if method == "touch":
                holder = self._holder(rid)
                holder.blocks, holder.cached = list(blocks), len(blocks)
        return commit

    def _pad(self, op: Pad):
        if not self._startable(op.rid):
            return None
        self._holder(op.rid).blocks.extend([0] * op.count)  # no call: the table alone changes
        self.events["null blocks in a table"] += 1
        return [], f"r{op.rid} table += {op.count} null blocks", _nothing

    def _cache(self, op: Cache):
        holder, model = self.holders.get(op.rid), self.model
        if holder is None or not model.caching:
            return None
        num_full = min(len(holder.blocks), len(op.hashes))
        if any(model.key[b] is not None for b in holder.blocks[holder.cached:num_full] if b):
            return None  # caching a cached block again is partial-block promotion: not here
        self._count_cache(op, holder, num_full)
        args = (list(op.hashes), list(holder.blocks), holder.cached, num_full, op.group)

        def commit(_, __):
            holder.cached = max(holder.cached, num_full)
        return [("cache_full_blocks", args)], \
            f"cache_full_blocks(r{op.rid}, num_cached={holder.cached}, num_full={num_full}, " \
            f"group={op.group})", commit

    def _free(self, op):
        """Free and Unpin: one call over every live holder's blocks; the holders are gone."""
        live = [r for r in dict.fromkeys(op.rids) if r in self.holders]
        if not live:
            return None
        blocks = []
        for rid in live:
            table = self.holders[rid].blocks
            blocks += table[::-1] if isinstance(op, Free) and op.reverse else list(table)
        if isinstance(op, Unpin):
            blocks = [b for b in blocks if b]  # unpin_blocks takes no null block
        self._count_free(op, blocks)

        def commit(_, __):
            for rid in live:
                del self.holders[rid]
        method = "free_blocks" if isinstance(op, Free) else "unpin_blocks"
        return [(method, (blocks,))], f"{method}({short(blocks, 60)})", commit

    _unpin = _free

    def _evict(self, op: Evict):
        model = self.model
        ids = sorted({b for b in op.block_ids if b < model.size})
        self.events["evict cached" if any(model.key[b] for b in ids) else "evict uncached"] += 1
        return [("evict_blocks", (ids,))], f"evict_blocks({set(ids) or '{}'})", _nothing

    def _probe(self, op: Probe):
        calls = [("get_cached_block", (h, tuple(op.groups))) for h in op.hashes]
        self.events["probe"] += 1
        return calls, f"get_cached_block x{len(calls)}, groups {list(op.groups)}", _nothing

    def _reset(self, op: Reset):
        model = self.model
        self.events["reset refused" if model.num_free() != model.size - 1 else "reset"] += 1
        return [("reset_prefix_cache", ())], "reset_prefix_cache()", _nothing

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

    # What the lock step counts (target.EVENTS): atheris features and the summary grid.

    def _count_alloc(self, n: int) -> None:
        model = self.model
        free = model.num_free()
        self.events["alloc refused" if n > free else "alloc exact fit" if n == free and n
                    else "alloc ok"] += 1
        if n <= free and any(model.key[b] for b in model.free[:n]):
            self.events["alloc evicts cached"] += 1

    def _count_touch(self, blocks) -> None:
        if any(b and self.model.ref[b] == 0 for b in blocks):
            self.events["touch a free cached block"] += 1
        if any(b == 0 for b in blocks):
            self.events["null blocks in a call"] += 1

    def _count_cache(self, op, holder, num_full: int) -> None:
        model = self.model
        new = [(h, op.group) for h in op.hashes[holder.cached:num_full]]
        self.events["cache" if new else "cache nothing new"] += 1
        if any(key in model.map for key in new):
            self.events["cache a hash cached elsewhere"] += 1
        if 0 in holder.blocks[holder.cached:num_full]:
            self.events["null blocks in a call"] += 1

    def _count_free(self, op, blocks) -> None:
        model = self.model
        counts = Counter(blocks)
        released = [b for b in counts if b and model.ref[b] == counts[b]]
        name = "unpin" if isinstance(op, Unpin) else "free in order" if not op.reverse else "free"
        self.events[name] += 1
        if any(model.key[b] for b in released):
            self.events[f"{name}: cached to the tail"] += 1
        if len(released) < len([b for b in counts if b]):
            self.events["free a shared block"] += 1
        if 0 in counts:
            self.events["null blocks in a call"] += 1

    def _state(self, where: str) -> list[tuple[str, str]]:
        return pool_problems(self.impl, self.model, where)


def _nothing(method, got) -> None:
    return None


def _compare(method: str, expected, actual, raised) -> list[tuple[str, str]]:
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
