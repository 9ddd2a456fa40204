"""Calls an SWA allocator class with upstream `SWATokenToKVPoolAllocator`'s interface in plain
ints: lists go in as tensors, results and state come out with `.tolist()`. Tensors stay here.
After every call the driver writes `POISON` over each tensor it passed in (the caller owns it).

SGLang's checks are switched by environment: `debug` sets SGLANG_DEBUG_MEMORY_POOL while the
allocator is built (its pools read it then), `strict` sets SGLANG_INVARIANT_CHECK, which
SGLang reads at every check, for the driver's life: each driver sets it, on or off."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

from kvfuzz.impl.changed_reads import ChangedReads
from kvfuzz.impl.driver_calls import (TensorDriver, free_list_of, int_list, staged_of,
                                      then_poison)
from kvfuzz.impl.swa.api_reads import api_reads
from kvfuzz.impl.swa.checks import DEBUG_ENV, INVARIANT_ENV, STRICT
from kvfuzz.impl.swa.kvcache import stand_in_kvcache
from kvfuzz.impl.swa.prefix_cache import Cached, PrefixCache


class SWADriver(ChangedReads, TensorDriver):
    host_copies = True

    def __init__(self, cls, size: int, size_swa: int, page_size: int, need_sort: bool,
                 device: str = "cpu", debug: bool = False, strict: bool = False):
        self.device, self.size = device, size
        os.environ[INVARIANT_ENV] = STRICT if strict else "0"
        before = os.environ.get(DEBUG_ENV)
        os.environ[DEBUG_ENV] = "1" if debug else "0"
        try:
            self.kvcache = stand_in_kvcache(cls)
            self.allocator = cls(size, size_swa, page_size, torch.float16, device,
                                 self.kvcache, need_sort)
        finally:
            if before is None:
                del os.environ[DEBUG_ENV]
            else:
                os.environ[DEBUG_ENV] = before

    # --- what a scheduler asks beyond allocating and releasing -----------------------------
    def reclaim(self, tree: str, entries, demand: int, prealloc: bool = False,
                full_demand: int = 0) -> dict:
        """`evict_to_free_tokens(cache, demand)`, or `reclaim_for_prealloc(cache, full_demand,
        demand)`, with the prefix cache `tree` holding `entries` ((rid, dead, live) of each
        cached request): what the cache was asked, and the call's result."""
        cache = None if tree == "none" else PrefixCache(
            self._cache_release, [Cached(rid, list(dead), list(live)) for rid, dead, live
                                  in entries], sharing=tree == "radix")
        if prealloc:
            result = self.allocator.reclaim_for_prealloc(cache, full_demand, demand)
        else:
            result = self.allocator.evict_to_free_tokens(cache, demand)
        return {"asked": [] if cache is None else [list(ask) for ask in cache.asked],
                "result": result if result is None or isinstance(result, (bool, str)) else
                type(result).__name__}

    def _cache_release(self, method: str, slots) -> None:
        """A release the prefix cache makes; its tensors are its own, dropped after the call."""
        self._release(method, slots)

    def resize(self, size: int, size_swa: int) -> None:
        self.allocator.resize(SimpleNamespace(full_max_total_num_tokens=size,
                                              swa_max_total_num_tokens=size_swa))

    def offload(self, slots) -> dict:
        """A retracted request's KV to the host and back: what the KV pool was handed."""
        index = self._tensor(slots)
        copy = self.allocator.get_cpu_copy(index)
        self.allocator.load_cpu_copy(copy, index)
        then_poison(None, index)
        return self.kvcache.host_copies(copy)

    def alloc_extend(self, prefix_lens, seq_lens, last_loc):
        return self._extend("alloc_extend", prefix_lens, seq_lens, last_loc)

    def alloc_extend_swa_tail(self, prefix_lens, seq_lens, last_loc, tail: int):
        return self._extend("alloc_extend_swa_tail", prefix_lens, seq_lens, last_loc, tail)

    def free(self, slots) -> None:
        self._release("free", slots)

    def free_swa(self, slots) -> None:
        self._release("free_swa", slots)

    def free_full(self, slots) -> None:
        self._release("free_full", slots)

    def free_segment(self, slots, start_pos: int) -> None:
        self._release("free_segment", slots, start_pos=start_pos)

    def free_swa_segment(self, slots, start_pos: int) -> None:
        self._release("free_swa_segment", slots, start_pos=start_pos)

    def free_full_segment(self, slots, start_pos: int) -> None:
        self._release("free_full_segment", slots, start_pos=start_pos)

    # A by-slot guard's releases of row segments: the class's own `free_segments` /
    # `free_full_segments` where it has them (upstream's base class does), else one call per
    # segment; an SWA-only release is one segment (`free_swa_segment`).
    def free_segments(self, segments) -> None:
        self._segments("free_segments", "free_segment", segments)

    def free_full_segments(self, segments) -> None:
        self._segments("free_full_segments", "free_full_segment", segments)

    def free_swa_segments(self, segments) -> None:
        self._segments(None, "free_swa_segment", segments)

    def _segments(self, batched: str | None, single: str, segments) -> None:
        indexes = [(self._tensor(slots), start) for slots, start in segments]
        method = getattr(self.allocator, batched, None) if batched else None
        if method is not None:
            method(list(indexes))
        else:
            for index, start in indexes:
                if index.numel():
                    getattr(self.allocator, single)(index, start_pos=start)
        then_poison(None, *(index for index, _ in indexes))

    # Releases on one of the allocator's pools itself (`full_attn_allocator`,
    # `swa_attn_allocator`), as an engine reaching past the allocator makes them.
    def full_pool_free(self, slots) -> None:
        self._pool_release(self.allocator.full_attn_allocator, slots)

    def swa_pool_free(self, slots) -> None:
        self._pool_release(self.allocator.swa_attn_allocator, slots)

    def full_pool_free_segments(self, segments) -> None:
        self._pool_segments(self.allocator.full_attn_allocator, segments)

    def swa_pool_free_segments(self, segments) -> None:
        self._pool_segments(self.allocator.swa_attn_allocator, segments)

    def _pool_release(self, pool, slots) -> None:
        index = self._tensor(slots)
        then_poison(pool.free(index), index)

    def _pool_segments(self, pool, segments) -> None:
        indexes = [(self._tensor(slots), start) for slots, start in segments]
        if getattr(pool, "free_segments", None) is not None:
            pool.free_segments(list(indexes))
        else:
            for index, start in indexes:
                if index.numel():
                    pool.free_segment(index, start_pos=start)
        then_poison(None, *(index for index, _ in indexes))

    def set_mapping(self, full, swa) -> None:
        full_index, swa_index = self._tensor(full), self._tensor(swa)
        then_poison(self.allocator.set_full_to_swa_mapping(full_index, swa_index), full_index,
                    swa_index)

    def clear_mapping(self, full) -> None:
        self._release("clear_full_to_swa_mapping", full)

    def group_begin(self) -> None:
        self.allocator.free_group_begin()

    def group_end(self) -> None:
        self.allocator.free_group_end()

    def state_since(self, since: int):
        """`state()` as what changed since read `since` (`ChangedReads`)."""
        return self.changed("state", since, self.state())

    def state(self) -> dict:
        """Everything compared after an op: sizes, both pools' free lists and staged pages, and
        the mapping of every full slot that has an SWA peer."""
        full, swa = self.allocator.full_attn_allocator, self.allocator.swa_attn_allocator
        mapping = int_list(self.allocator.full_to_swa_index_mapping)
        pairs = {f: s for f, s in enumerate(mapping[:-1]) if s}
        return {"available_size": int(self.allocator.available_size()),
                "full_available_size": int(self.allocator.full_available_size()),
                "swa_available_size": int(self.allocator.swa_available_size()),
                "full free": free_list_of(full), "full staged": staged_of(full),
                "swa free": free_list_of(swa), "swa staged": staged_of(swa),
                "mapping": pairs,
                "api": api_reads(self.allocator, getattr(self, "kvcache", None), list(pairs))}
