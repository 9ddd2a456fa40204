"""What kvfuzz's SWA allocator (`swa_allocator.py`) answers beyond allocating and releasing,
upstream `SWATokenToKVPoolAllocator`'s calls of the same names: sizes, a resize, reclaiming
room through the prefix cache (asking it for each pool's shortfall), and a KV offload through
the KV pool. A mixin: it reads the allocator's pools."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvictParams:
    """What a prefix cache's `evict_for_alloc` is asked (SGLang's class of that name)."""

    num_tokens: int = 0
    swa_num_tokens: int = 0


class SchedulerAPI:
    @property
    def size_full(self) -> int:
        return self._size_full

    @property
    def size_swa(self) -> int:
        return self._size_swa

    @property
    def size(self) -> int:
        return min(self._size_full, self._size_swa)

    def resize(self, config) -> None:
        """Both pools at the sizes of `config` (at most those built), fresh: the same pool
        objects (a caller may hold them), their page counts changed."""
        self._size_full = int(config.full_max_total_num_tokens)
        self._size_swa = int(config.swa_max_total_num_tokens)
        for pool, size in ((self.full_attn_allocator, self._size_full),
                           (self.swa_attn_allocator, self._size_swa)):
            pool.size, pool.num_pages = size, size // self.page_size
        self.clear()

    def evict_to_free_tokens(self, tree_cache, num_tokens: int) -> None:
        if tree_cache is None or not tree_cache.supports_prefix_sharing():
            return
        full = max(0, num_tokens - self.full_available_size())
        swa = max(0, num_tokens - self.swa_available_size())
        if full or swa:
            tree_cache.evict_for_alloc(EvictParams(num_tokens=full, swa_num_tokens=swa))

    def reclaim_for_prealloc(self, tree_cache, full_tokens: int, swa_tokens: int):
        """Room for a preallocation: only the SWA side is reclaimed (the caller's budget prices
        the full side); None when it is there, else what is missing."""
        available = self.swa_available_size()
        if available < swa_tokens:
            tree_cache.evict_for_alloc(EvictParams(swa_num_tokens=swa_tokens - available))
            available = self.swa_available_size()
        if available < swa_tokens:
            return f"SWA eviction insufficient: needed={swa_tokens}, available={available}"
        return None

    def get_cpu_copy(self, indices, mamba_indices=None, req_pool_index=None):
        return self._kvcache.get_cpu_copy(indices, mamba_indices=mamba_indices,
                                          req_pool_index=req_pool_index)

    def load_cpu_copy(self, kv_cache_cpu, indices, mamba_indices=None, req_pool_index=None):
        return self._kvcache.load_cpu_copy(kv_cache_cpu, indices, mamba_indices=mamba_indices,
                                           req_pool_index=req_pool_index)
