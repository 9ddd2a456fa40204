"""`kvfuzz.guard` and `kvfuzz.record` of a live vLLM `BlockPool`: the pool an engine's
KV-cache manager calls, wrapped so that each call becomes an op of a `blockpool` trace
(`strategies/blockpool/trace.py`) as it happens and, guarding, is checked in lock step with the
oracle (`fuzz/engine/guard.py`): the result, the reuse watcher, then the whole pool (free queue
order and links, reference counts, hashes, the hash map, the invariants).

The engine's calls name blocks, not requests, so they map onto the trace's by-id ops:
`get_new_blocks(n)`: `alloc` of n for a holder of its own; `touch(blocks)`: `touch_ids`;
`free_blocks(blocks)`: `free_ids`, in the caller's order; `unpin_blocks(blocks, on_reuse)`:
`unpin_ids` (what the watcher hears is compared); `cache_full_blocks(request, blocks,
num_cached, num_full, ...)`: `cache_ids` of blocks[num_cached:num_full] with the request's
hashes there (and its block mask as `skip`); `get_cached_block(hash, groups)`: `probe`;
`evict_blocks(ids)`: `evict`; `reset_prefix_cache()`: `reset`. The engine's hashes are named
by small ints in the order first seen. Refused (`GuardUnsupported`, before the call): every
other method that changes the pool (partial-block entries: `cache_partial_block`,
`move_block_hashes`), a block of another pool, a
`cache_full_blocks` whose block size is not the pool's hash block size or that caches a block
cached already, a pool larger than the format holds (2^11 blocks) or used before it was guarded.
Reads go through (`get_num_free_blocks`, `get_usage`, events, and every attribute).
"""

from __future__ import annotations

import inspect

from kvfuzz.fuzz.engine.guard import (GuardedObject, GuardUnsupported, Session, modelled,
                                      open_session, same_args)
from kvfuzz.strategies.blockpool.codec import (MAX_BLOCKS, MAX_GROUP, MAX_HASH_BLOCK, MAX_ID,
                                               MAX_LIST)
from kvfuzz.strategies.blockpool.trace import (Alloc, CacheIds, Evict, FreeIds, Probe, Reset,
                                               TouchIds, Trace, UnpinIds)

READS = frozenset({"get_num_free_blocks", "get_usage", "take_events", "is_block_writable",
                   "emit_cached_block_events"})
# Where vLLM builds the pool (`kvfuzz guard blockpool -- COMMAND`: fuzz/engine/autoguard/).
SITES = ("vllm.v1.core.kv_cache_coordinator:BlockPool",)


def header(pool) -> Trace:
    """The trace's settings, read from the live pool, which must be as new."""
    def refuse(why: str):
        raise GuardUnsupported(f"kvfuzz.guard(blockpool): {why}")

    blocks = int(pool.num_gpu_blocks)
    if not 1 <= blocks <= MAX_BLOCKS:
        refuse(f"a pool of {blocks} blocks: the trace holds at most {MAX_BLOCKS} (each op "
               f"reads every block)")
    if pool.get_num_free_blocks() != blocks - 1 or any(
            block.block_hash is not None for block in pool.blocks) or \
            getattr(pool, "_reuse_watchers", None):  # a watcher the oracle never heard of
        refuse("the pool has been used: guard it before its first call (the oracle starts "
               "from an empty pool)")
    size = int(pool.hash_block_size)
    if not 1 <= size <= MAX_HASH_BLOCK:
        refuse(f"a hash block of {size} tokens: the trace holds 1 to {MAX_HASH_BLOCK}")
    # No KV events in the trace: the engine's own consumer takes them, not the guard.
    return Trace(blocks, bool(pool.enable_caching), (), hash_block_size=size)


def guard(pool, *, check: bool = True, impl=None, corpus="corpus",
          on_unsupported: str = "raise"):
    """The live `pool`, wrapped: checked in lock step with the oracle (`check`), or only
    recorded. `impl` names it in reports (default: its class's catalogue entry). A call the
    trace cannot model raises `GuardUnsupported` (`on_unsupported="raise"`), or, with "stop",
    is said once on stderr and goes through, and so does every call after it, unchecked."""
    trace = header(pool)
    names: dict[bytes, int] = {}
    driver = None
    if check:
        from kvfuzz.impl.blockpool.live import LivePoolDriver

        driver = LivePoolDriver(pool, trace.blocks, names)
    session = open_session("blockpool", pool, trace, driver, impl, corpus, on_unsupported)
    return GuardedPool(pool, session, driver, names)


class GuardedPool(GuardedObject):
    """Stands for the pool: the manager's calls go through `kvfuzz_session`."""

    TARGET, READS = "blockpool", READS

    def __init__(self, pool, session: Session, driver, names: dict[bytes, int]):
        super().__init__(pool, session, driver)
        state = vars(self)
        state["_kvfuzz_names"] = names    # the engine's block hash -> the trace's int
        state["_kvfuzz_next_rid"] = 0     # each get_new_blocks is a holder of its own
        state["_kvfuzz_cache_signature"] = inspect.signature(pool.cache_full_blocks)

    # -- the calls the trace models -----------------------------------------------------------
    @modelled
    def get_new_blocks(self, num_blocks):
        pool = self._kvfuzz_object
        n = self._count(num_blocks, "get_new_blocks", MAX_BLOCKS)
        rid = self._kvfuzz_next_rid
        vars(self)["_kvfuzz_next_rid"] = rid + 1
        return self._run(Alloc(rid, n), "get_new_blocks", lambda: pool.get_new_blocks(num_blocks),
                         same_args((n,)))

    @modelled
    def touch(self, blocks):
        pool = self._kvfuzz_object
        if not isinstance(blocks, (list, tuple)):
            self._refuse("touch of an iterator: a list of blocks is what the pool takes")
        # one flat list, or one list per group (a release before the flat signature)
        nested = [list(b) if isinstance(b, (list, tuple)) else [b] for b in blocks]
        ids = self._ids([b for group in nested for b in group], "touch")
        return self._run(TouchIds(tuple(ids)), "touch", lambda: pool.touch(blocks),
                         same_args((ids,)))

    @modelled
    def free_blocks(self, ordered_blocks):
        pool = self._kvfuzz_object
        blocks = list(ordered_blocks)  # an iterator is read once: the pool gets the same list
        ids = self._ids(blocks, "free_blocks")
        return self._run(FreeIds(tuple(ids)), "free_blocks", lambda: pool.free_blocks(blocks),
                         same_args((ids,)))

    @modelled
    def unpin_blocks(self, blocks, on_reuse):
        pool, driver = self._kvfuzz_object, self._kvfuzz_driver
        blocks = list(blocks)
        ids = self._ids(blocks, "unpin_blocks")
        if 0 in ids:
            self._refuse("unpin_blocks of the null block")
        watcher = on_reuse
        if driver is not None:  # what the watcher hears is compared with the oracle's
            def watcher(block):
                driver.heard.append(int(block.block_id))
                return on_reuse(block)
        return self._run(UnpinIds(tuple(ids)), "unpin_blocks",
                         lambda: pool.unpin_blocks(blocks, watcher), same_args((ids,)))

    @modelled
    def cache_full_blocks(self, request, blocks, *args, **kwargs):
        pool = self._kvfuzz_object
        bound = self._kvfuzz_cache_signature.bind(request, blocks, *args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        num_cached, num_full = int(given["num_cached_blocks"]), int(given["num_full_blocks"])
        group, block_size = int(given["kv_cache_group_id"]), int(given["block_size"])
        mask = given.get("block_mask")
        if block_size != pool.hash_block_size:
            self._refuse(f"cache_full_blocks of block size {block_size}, hash block size "
                         f"{pool.hash_block_size}: merged hashes are not modelled")
        if not 0 <= group <= MAX_GROUP:
            self._refuse(f"cache_full_blocks of group {group}: outside 0..{MAX_GROUP}")
        new = list(blocks[num_cached:num_full]) if num_cached < num_full else []
        hashes = list(request.block_hashes)[num_cached:num_full] if new else []
        if len(hashes) != len(new) or len(new) > MAX_LIST:
            self._refuse(f"cache_full_blocks of {len(new)} blocks with {len(hashes)} hashes")
        skip = tuple(i for i, keep in enumerate(mask or ()) if not keep)
        ids = self._ids(new, "cache_full_blocks")
        if any(b.block_hash is not None and not b.is_null for i, b in enumerate(new)
               if i not in skip):
            self._refuse("cache_full_blocks of a block cached already (partial-block promotion "
                         "is not modelled)")
        op = CacheIds(tuple(ids), tuple(self._name(h) for h in hashes), group, skip, num_cached)
        return self._run(op, "cache_full_blocks",
                         lambda: pool.cache_full_blocks(*bound.args, **bound.kwargs),
                         same_args((ids, list(op.hashes), group, skip)))

    @modelled
    def get_cached_block(self, block_hash, kv_cache_group_ids):
        pool = self._kvfuzz_object
        groups = tuple(int(g) for g in kv_cache_group_ids)
        if not 1 <= len(groups) <= MAX_GROUP + 1 or any(not 0 <= g <= MAX_GROUP for g in groups):
            self._refuse(f"get_cached_block of groups {list(groups)}: the trace holds 1 to "
                         f"{MAX_GROUP + 1} groups of 0..{MAX_GROUP}")
        name = self._name(block_hash)
        return self._run(Probe((name,), groups), "get_cached_block",
                         lambda: pool.get_cached_block(block_hash, kv_cache_group_ids),
                         same_args((name, groups)))

    @modelled
    def evict_blocks(self, block_ids):
        pool, session = self._kvfuzz_object, self.kvfuzz_session
        ids = sorted(set(block_ids))
        if len(ids) > MAX_LIST or any(type(b) is not int or not 0 <= b <= MAX_ID for b in ids):
            self._refuse(f"evict_blocks of {len(ids)} ids outside the trace's limits")
        wanted = [b for b in ids if b < session.header.blocks]
        return self._run(Evict(tuple(ids)), "evict_blocks", lambda: pool.evict_blocks(block_ids),
                         same_args((wanted,)))

    @modelled
    def reset_prefix_cache(self):
        pool = self._kvfuzz_object
        return self._run(Reset(), "reset_prefix_cache", pool.reset_prefix_cache)

    # -- mapping -----------------------------------------------------------------------------
    def _ids(self, blocks, method: str) -> list[int]:
        """The ids of the pool's own blocks; a block of another pool (or not a block) is
        refused: the trace has one pool."""
        pool = self._kvfuzz_object
        ids = []
        for block in blocks:
            block_id = getattr(block, "block_id", None)
            if type(block_id) is not int or not 0 <= block_id < len(pool.blocks) or \
                    pool.blocks[block_id] is not block:
                self._refuse(f"{method} of {block!r}, which is not one of this pool's blocks")
            ids.append(block_id)
        if len(ids) > MAX_LIST:
            self._refuse(f"{method} of {len(ids)} blocks: the trace holds at most {MAX_LIST}")
        return ids

    def _name(self, block_hash) -> int:
        """The trace's int for the engine's hash: 1, 2, ... in the order first seen."""
        names = self._kvfuzz_names
        key = bytes(block_hash)
        if key not in names:
            if len(names) >= MAX_ID:
                self._refuse("more distinct block hashes than the trace can name")
            names[key] = len(names) + 1
        return names[key]
