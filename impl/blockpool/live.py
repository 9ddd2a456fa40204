"""The blockpool lock step's driver over a live vLLM `BlockPool`, one an engine's manager is
using (`kvfuzz.guard(pool, "blockpool")`, `fuzz/blockpool/guard.py`): each call the engine
makes is handed over and made when the lock step reaches it, exactly once, with the engine's
own arguments (`LiveCalls`); the state is read from the live pool when the lock step asks.

The engine's block hashes are its own byte strings; the trace names each by a small int in the
order the guard first saw it (`names`), and a pool key is read back through the same table.
"""

from __future__ import annotations

from kvfuzz.impl.blockpool.driver import GROUP_BYTES, PoolReader, decode_key
from kvfuzz.impl.live_calls import LiveCalls


class LivePoolDriver(LiveCalls, PoolReader):
    def __init__(self, pool, blocks: int, names: dict[bytes, int]):
        super().__init__(pool, blocks)
        self.names = names          # the engine's block hash -> the trace's int (the guard's)
        self.heard: list[int] = []  # what the engine's reuse watchers heard in this call

    def _perform(self, method: str, args: tuple):
        self.heard = []  # the guard's watchers append to it while the call runs
        return super()._perform(method, args)

    def get_new_blocks(self, count: int) -> list[int]:
        return [int(block.block_id) for block in self._perform("get_new_blocks", (count,))]

    def touch(self, ids) -> None:
        self._perform("touch", (list(ids),))

    def free_blocks(self, ids) -> None:
        self._perform("free_blocks", (list(ids),))

    def unpin_blocks(self, ids) -> None:
        self._perform("unpin_blocks", (list(ids),))

    def cache_full_blocks(self, prompt, ids, num_cached: int, num_full: int, group: int,
                          block_size: int, skip=()) -> None:
        self._perform("cache_full_blocks", (list(ids[num_cached:num_full]),
                                            list(prompt.hashes[num_cached:num_full]), group,
                                            tuple(skip)))

    def get_cached_block(self, block_hash: int, groups) -> list[int] | None:
        found = self._perform("get_cached_block", (block_hash, tuple(groups)))
        return None if found is None else [int(block.block_id) for block in found]

    def evict_blocks(self, ids) -> None:
        self._perform("evict_blocks", (sorted(ids),))

    def reset_prefix_cache(self):
        return self._perform("reset_prefix_cache", ())

    def decode_key(self, key) -> tuple[int, int]:
        raw = bytes(key)
        found = self.names.get(raw[:-GROUP_BYTES])
        return decode_key(key) if found is None else \
            (found, int.from_bytes(raw[-GROUP_BYTES:], "big"))
