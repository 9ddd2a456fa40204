"""The block-pool judge's handlers of the ops that name blocks, not holders: what a live guard
records (`fuzz/blockpool/guard.py`: an engine's calls carry blocks). Ids outside the pool are
dropped; nothing else is resolved away, so an engine's double free stays one."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.engine.lockstep import Call, handles, short
from kvfuzz.strategies.blockpool.trace import CacheIds, FreeIds, TouchIds, UnpinIds


class ByIdOps:
    """Mixed into `BlockPoolLockstep`, whose `_call`, `_prompt` and counters it uses."""

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
        """Blocks `first`.. of a request: the call gets `first` null blocks ahead of them and
        that cached count, so each entry covers the tokens its block ends at."""
        model = self.model
        if not model.caching or len(self._in_pool(op.block_ids)) != len(op.block_ids):
            return
        skip = set(op.skip)
        cached = [b for i, b in enumerate(op.block_ids) if b and i not in skip]
        if any(model.key[b] is not None for b in cached):
            return  # a block cached already: the guard refuses it, a replay skips it
        self.count("cache by id")
        if 0 in op.block_ids:
            self.count("null blocks in a call")
        first, size = op.first, self.trace.hash_block_size
        yield Call(f"cache_full_blocks(blocks {short(list(op.block_ids), 60)}, group={op.group}"
                   f"{f', from block {first}' if first else ''}"
                   f"{f', mask without {sorted(skip)}' if skip else ''})")
        prompt = self._prompt([0] * first + list(op.hashes))
        yield self._call("cache_full_blocks", (prompt, [0] * first + list(op.block_ids), first,
                                               first + len(op.block_ids), op.group, size,
                                               tuple(sorted(skip))))
