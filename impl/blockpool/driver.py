"""Calls a block pool with vLLM `BlockPool`'s interface (vllm 0.33.0) in plain ints: block ids go
in as the pool's own `KVCacheBlock` objects (`pool.blocks[id]`), hashes as vLLM's byte strings,
and results and state come out as ids and ints.

The state is read the way a debugger would, from the structures the contract names: each block's
`ref_cnt` and `block_hash`, the free queue walked link by link from its head (so a broken list
is reported, not followed forever), and the hash-to-block map."""

from __future__ import annotations

from types import SimpleNamespace

HASH_BLOCK_SIZE = 16
GROUP_BYTES = 4  # vLLM packs a group id after the hash, 4 bytes big-endian


def hash_bytes(value: int) -> bytes:
    return value.to_bytes(8, "big")


def decode_key(key) -> tuple[int, int]:
    """(hash, group) of a `BlockHashWithGroupId`, as the driver encoded it."""
    raw = bytes(key)
    return int.from_bytes(raw[:-GROUP_BYTES], "big"), int.from_bytes(raw[-GROUP_BYTES:], "big")


class PoolReader:
    """The state of a pool with vLLM `BlockPool`'s structures, read after every call."""

    def __init__(self, pool, blocks: int):
        self.pool, self.size = pool, blocks

    def num_free(self) -> int:
        return int(self.pool.get_num_free_blocks())

    def decode_key(self, key) -> tuple[int, int]:
        """(hash, group) of a pool key as the oracle names it (a live pool's hashes are the
        engine's own: `impl/kvmanager/live.py` translates them)."""
        return decode_key(key)

    def null_block(self) -> int:
        return int(self.pool.null_block.block_id)

    def ref_counts(self) -> list[int]:
        return [int(block.ref_cnt) for block in self.pool.blocks]

    def keys(self) -> list:
        """Each block's (hash, group), or None; a block with more than one entry (vLLM's partial
        entries, which no op here makes) shows them all as a list."""
        extra = getattr(self.pool, "cached_block_hashes_by_block", {}) or {}
        keys = []
        for block in self.pool.blocks:
            key = None if block.block_hash is None else self.decode_key(block.block_hash)
            more = sorted(self.decode_key(k) for k in extra.get(block.block_id, ()))
            keys.append([key, *more] if more else key)
        return keys

    def cache_map(self) -> dict[tuple[int, int], list[int]]:
        entries = {}
        for key, value in self.pool.cached_block_hash_to_block._cache.items():
            blocks = value.values() if isinstance(value, dict) else [value]
            entries[self.decode_key(key)] = [int(block.block_id) for block in blocks]
        return entries

    def free_queue(self) -> tuple[list[int], str | None]:
        """The free queue head first, and what is wrong with its links (None when nothing)."""
        queue = self.pool.free_block_queue
        head, tail = queue.fake_free_list_head, queue.fake_free_list_tail
        order, previous, node = [], head, head.next_free_block
        while node is not tail:
            if node is None:
                return order, f"the list ends after {len(order)} blocks without reaching its tail"
            if node.prev_free_block is not previous:
                return order, (f"block {node.block_id}'s prev link does not point at the block "
                               f"before it in the list")
            order.append(int(node.block_id))
            if len(order) > self.size:
                return order, "the list has more entries than the pool has blocks (a cycle)"
            previous, node = node, node.next_free_block
        if tail.prev_free_block is not previous:
            return order, "the tail's prev link does not point at the last block"
        return order, None


class BlockPoolDriver(PoolReader):
    def __init__(self, cls, blocks: int, caching: bool):
        super().__init__(cls(num_gpu_blocks=blocks, enable_caching=caching,
                             hash_block_size=HASH_BLOCK_SIZE), blocks)
        self.heard: list[int] = []

    def _blocks(self, ids) -> list:
        return [self.pool.blocks[i] for i in ids]

    def _heard(self, block) -> None:
        self.heard.append(int(block.block_id))

    def get_new_blocks(self, count: int) -> list[int]:
        self.heard = []
        return [int(block.block_id) for block in self.pool.get_new_blocks(count)]

    def touch(self, ids) -> None:
        self.heard = []
        self.pool.touch(self._blocks(ids))

    def free_blocks(self, ids) -> None:
        self.heard = []
        self.pool.free_blocks(self._blocks(ids))

    def unpin_blocks(self, ids) -> None:
        self.heard = []
        self.pool.unpin_blocks(self._blocks(ids), self._heard)

    def cache_full_blocks(self, hashes, ids, num_cached: int, num_full: int, group: int,
                          skip=()) -> None:
        self.heard = []
        request = SimpleNamespace(block_hashes=[hash_bytes(h) for h in hashes])
        # block_mask only when a position is skipped: a release before it has no such argument
        mask = {} if not skip else {"block_mask": [i not in skip
                                                   for i in range(num_full - num_cached)]}
        self.pool.cache_full_blocks(request, self._blocks(ids), num_cached, num_full,
                                    HASH_BLOCK_SIZE, group, **mask)

    def get_cached_block(self, block_hash: int, groups) -> list[int] | None:
        self.heard = []
        found = self.pool.get_cached_block(hash_bytes(block_hash), list(groups))
        return None if found is None else [int(block.block_id) for block in found]

    def evict_blocks(self, ids) -> None:
        self.heard = []
        self.pool.evict_blocks(set(ids))

    def reset_prefix_cache(self):
        self.heard = []
        return self.pool.reset_prefix_cache()
