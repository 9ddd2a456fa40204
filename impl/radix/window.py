"""Drives a pure-SWA prefix cache (SGLang `PureSWARadixCache`, sglang 0.5.23) with its sliding
window as the scheduler does for an all-SWA model: built with `sliding_window_size`, over the
released `PureSWATokenToKVPoolAllocator` (one pool, page size 1) on the stand-in KV pool the swa
target uses; before a decode step `evict_sliding_windows(req, pre_len)`; where the model runner is
prefill-aware, `swa_evict_floor` set after each prefill chunk; evictions asked as an all-SWA
scheduler asks (`swa_num_tokens`). Reads add the four SWA/full size reads and each request's
window cursor.

Before 0.5.23 what differs is read from the release: the request's window cursor is the field
`kv.swa_evicted_seqlen` where `free_swa_out_of_window_slots` takes no `component_type` (0.5.20;
`get_evicted_seqlen(SWA)` from 0.5.21 on, `cursor`); a cache without `evict_sliding_windows`
(0.5.20) is slid as that release's scheduler did (`maybe_evict_swa`: only once the window has
moved past the cursor by the interval, 1 here as 0.5.23's default, then its `_evict_swa`'s
`free_swa_out_of_window_slots`); and where `CacheInitParams` has no `draft_swa_window`
(before 0.5.23) no draft probe is built (`draft_retain` None: nothing to ask)."""

from __future__ import annotations

import dataclasses
import importlib

import torch

from kvfuzz.impl.radix.driver import RadixDriver, _sglang
from kvfuzz.impl.radix.legacy import read_swa_cursor
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
        self.draft_retain = None  # (before 0.5.23 there is no draft window to build with)
        if any(field.name == "draft_swa_window" for field in dataclasses.fields(self.params)):
            probe = cls(dataclasses.replace(self.params, draft_swa_window=draft))
            self.draft_retain = (draft, int(probe.swa_retain_window))
        self.window = window
        self.cursor_by_component = None  # where the release keeps the cursor: `cursor`

    def _build_allocator(self, cls, size: int, page_size: int, device: str):
        from kvfuzz.impl.swa.kvcache import stand_in_kvcache

        pure = _sglang("allocator.swa", "PureSWATokenToKVPoolAllocator")
        return pure(size, page_size, torch.float16, device, stand_in_kvcache(pure), False)

    def checkpoint(self, rid: int, finishing: bool = False) -> int:
        """A finish through `cache_finished_req` (0.5.20, `impl/radix/legacy.py`) answers
        nothing; what it cached is the key up to the floor, page-ceiled (it inserts
        `[0, swa_evict_floor)` and frees the rest), which is what is reported."""
        protected = super().checkpoint(rid, finishing)
        request = self.requests[rid]
        floor = request.kv.swa_evict_floor
        if getattr(request, "done_by_finish", False) and floor > 0:
            protected = min(-(-floor // self.page_size) * self.page_size, protected)
            request.kv.cache_protected_len = protected
        return protected

    # -- the scheduler's window calls ---------------------------------------------------------
    def set_floor(self, rid: int, floor: int) -> None:
        """A prefill-aware model runner's `req.kv.swa_evict_floor = req.extend_end`."""
        self.requests[rid].kv.swa_evict_floor = floor

    def slide(self, rid: int) -> int:
        """`evict_sliding_windows(req, seqlen - 1)` before a decode step (`seqlen - 1`: the
        tokens whose KV the request holds): the request's window cursor after it."""
        request = self.requests[rid]
        # the scheduler's `maybe_evict_swa` slides only a cache that says it supports SWA
        if not self.cache.supports_swa():
            return self.cursor(request.kv)
        if callable(getattr(self.cache, "evict_sliding_windows", None)):
            self.cache.evict_sliding_windows(request, request.filled)
        elif request.filled - self.window >= self.cursor(request.kv) + 1:  # 0.5.20's gate
            self._free_out_of_window(request)
        return self.cursor(request.kv)

    def _free_out_of_window(self, request) -> None:
        """0.5.20's `ScheduleBatch._evict_swa(req, seqlen - 1)`."""
        common = importlib.import_module("sglang.srt.mem_cache.common")
        common.free_swa_out_of_window_slots(
            request, request.filled, sliding_window_size=self.cache.sliding_window_size,
            page_size=self.cache.page_size, req_to_token_pool=self.rows,
            token_to_kv_pool_allocator=self.allocator, is_chunk_cache=False,
            retain_floor=self.cache.swa_retain_floor(request))

    def cursor(self, kv) -> int:
        """A request's window cursor where the release keeps it (`legacy.read_swa_cursor`)."""
        return read_swa_cursor(self, kv)

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
        snap["cursors"] = {rid: self.cursor(r.kv)
                           for rid, r in self.requests.items() if rid in self.live}
        return snap
