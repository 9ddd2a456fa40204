"""Drives a pure-SWA prefix cache (SGLang `PureSWARadixCache`, sglang 0.5.23) with its sliding
window as the scheduler does for an all-SWA model: built with `sliding_window_size`, over the
released `PureSWATokenToKVPoolAllocator` (one pool, page size 1) on the stand-in KV pool the swa
target uses; before a decode step `evict_sliding_windows(req, pre_len)`; where the model runner is
prefill-aware, `swa_evict_floor` set after each prefill chunk; evictions asked as an all-SWA
scheduler asks (`swa_num_tokens`). Reads add the four SWA/full size reads and each request's
window cursor."""

from __future__ import annotations

import dataclasses

import torch

from kvfuzz.impl.radix.driver import RadixDriver, _sglang
from kvfuzz.impl.radix.reader import snapshot


class WindowDriver(RadixDriver):
    def __init__(self, cls, page_size: int, size: int, policy: str, events: bool, rows: int,
                 context: int, device: str = "cpu", poison_keys: bool = True, window: int = 1):
        self.SWA = _sglang("unified_cache.component_type", "ComponentType").SWA
        super().__init__(cls, page_size, size, policy, events, rows, context, device,
                         poison_keys, sliding_window_size=window)
        self.free_pool = self.allocator.swa_attn_allocator  # where the reader reads free pages
        # A speculative draft model with a longer SWA window (`draft_swa_window`) widens what a
        # running request's frees keep (`swa_retain_window`): the traces run without a draft, so
        # a second cache, built with a draft one token past the window on the same allocator
        # (its __init__ and reset leave the allocator alone), is asked once what it keeps.
        draft = window + 1
        probe = cls(dataclasses.replace(self.params, draft_swa_window=draft))
        self.draft_retain = (draft, int(probe.swa_retain_window))

    def _build_allocator(self, cls, size: int, page_size: int, device: str):
        from kvfuzz.impl.swa.kvcache import stand_in_kvcache

        pure = _sglang("allocator.swa", "PureSWATokenToKVPoolAllocator")
        return pure(size, page_size, torch.float16, device, stand_in_kvcache(pure), False)

    # -- the scheduler's window calls ---------------------------------------------------------
    def set_floor(self, rid: int, floor: int) -> None:
        """A prefill-aware model runner's `req.kv.swa_evict_floor = req.extend_end`."""
        self.requests[rid].kv.swa_evict_floor = floor

    def slide(self, rid: int) -> int:
        """`evict_sliding_windows(req, seqlen - 1)` before a decode step (`seqlen - 1`: the
        tokens whose KV the request holds): the request's window cursor after it."""
        request = self.requests[rid]
        # the scheduler's `maybe_evict_swa` slides only a cache that says it supports SWA
        if self.cache.supports_swa():
            self.cache.evict_sliding_windows(request, request.filled)
        return int(request.kv.get_evicted_seqlen(self.SWA))

    def evict(self, num_tokens: int) -> int:
        """As an all-SWA scheduler asks (`reclaim_for_prealloc`): `swa_num_tokens` alone."""
        result = self.cache.evict(self.EvictParams(swa_num_tokens=num_tokens))
        return int(result.num_tokens_evicted)

    def evict_for_shortfall(self, num_tokens: int) -> int:
        """An allocation's `evict_to_free_tokens`: the one pool's shortfall as both asks."""
        result = self.cache.evict_for_alloc(self.EvictParams(num_tokens=num_tokens,
                                                             swa_num_tokens=num_tokens))
        return int(result.num_tokens_evicted)

    # -- state --------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        snap, cache = snapshot(self), self.cache
        snap["swa"] = {"swa_evictable": int(cache.swa_evictable_size()),
                       "swa_protected": int(cache.swa_protected_size()),
                       "full_evictable": int(cache.full_evictable_size()),
                       "full_protected": int(cache.full_protected_size())}
        snap["draft_retain"] = self.draft_retain
        snap["cursors"] = {rid: int(r.kv.get_evicted_seqlen(self.SWA))
                           for rid, r in self.requests.items() if rid in self.live}
        return snap
