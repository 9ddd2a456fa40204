"""Calls an allocator class with upstream `PagedTokenToKVPoolAllocator`'s interface (or, with
`token`, `TokenToKVPoolAllocator`'s) in plain ints: lists go in as tensors, results come out
with one `.tolist()` after each call. Tensors stay here.

The caller owns what it passes in: after every call the driver writes `POISON` over each tensor
it passed, as a scheduler reuses its request-to-token rows. An allocator that kept one (a free
group holding the caller's view, staged pages aliasing the argument) shows it later as page
-99 on its free list. `reuse_page_ids=False` spares `free_page_ids`' argument, for a class that
declares it keeps it (strategies/allocator/profile.py).

A class with the offload calls (`get_cpu_copy`, `load_cpu_copy`) is built with a recording KV
cache (`kvcache_stub.py`) instead of None: `offload_roundtrip` reads what reached it."""

from __future__ import annotations

import os

import torch

from kvfuzz.impl.allocator.kvcache_stub import RecordingKVCache
from kvfuzz.impl.driver_calls import TensorDriver, free_list_of, staged_of, taken, then_poison

DEBUG_ENV = "SGLANG_DEBUG_MEMORY_POOL"


class AllocatorDriver(TensorDriver):
    def __init__(self, cls, size: int, page_size: int, need_sort: bool, debug: bool,
                 device: str = "cpu", token: bool = False, reuse_page_ids: bool = True):
        self.device, self.page_size, self.reuse_page_ids = device, page_size, reuse_page_ids
        before = os.environ.get(DEBUG_ENV)
        os.environ[DEBUG_ENV] = "1" if debug else "0"  # upstream reads it in __init__
        self.kvcache = RecordingKVCache() if offloads(cls) else None
        try:
            self.allocator = cls(size, torch.float16, device, self.kvcache, need_sort) if token \
                else cls(size, page_size, torch.float16, device, self.kvcache, need_sort)
        finally:
            if before is None:
                del os.environ[DEBUG_ENV]
            else:
                os.environ[DEBUG_ENV] = before

    def alloc_extend(self, prefix_lens, seq_lens, last_loc, num_new_pages=None):
        """`num_new_pages`, the scheduler's count, goes to a class that takes it (SGLang's
        before 0.5.13 counts for itself)."""
        return self._extend("alloc_extend", prefix_lens, seq_lens, last_loc,
                            **taken(self.allocator.alloc_extend, num_new_pages=num_new_pages))

    def free_slots(self, slots) -> None:
        self._release("free", slots)

    def free_segment(self, slots, start_pos: int) -> None:
        self._release("free_segment", slots, start_pos=start_pos)

    def free_segments(self, segments) -> None:
        """`free_segments([(slots, start_pos), ...])`; a release before it had only
        `free_segment`, which its segments go to one by one."""
        indices = [(self._tensor(slots), start) for slots, start in segments]
        if hasattr(self.allocator, "free_segments"):
            self.allocator.free_segments(indices)
        else:
            for index, start in indices:
                if index.numel():
                    self.allocator.free_segment(index, start_pos=start)
        then_poison(None, *(index for index, _ in indices))

    def free_page_ids(self, pages) -> None:
        ids = self._tensor(pages)
        then_poison(self.allocator.free_page_ids(ids), *([ids] if self.reuse_page_ids else []))

    def group_begin(self) -> None:
        self.allocator.free_group_begin()

    def group_end(self) -> None:
        self.allocator.free_group_end()

    def offload_roundtrip(self, slots):
        """A request's slots to host memory and back, as a scheduler retracting it does:
        `copy = get_cpu_copy(slots)`, `load_cpu_copy(copy, slots)`. What reached the KV cache,
        in order, as [method, slots, 1 or 0]: for get_cpu_copy, whether the allocator returned
        the copy the cache made; for load_cpu_copy, whether it loaded that copy. None for a
        class without the calls (or with the base class's NotImplementedError)."""
        if self.kvcache is None:
            return None
        self.kvcache.calls.clear()
        index = self._tensor(slots)
        try:
            returned = self.allocator.get_cpu_copy(index)
            self.allocator.load_cpu_copy(returned, index)
        except NotImplementedError:
            return None
        then_poison(None, index)
        made = [copy for method, _, copy in self.kvcache.calls if method == "get_cpu_copy"]
        return [[method, indices, int(copy is returned if method == "get_cpu_copy"
                                      else any(copy is m for m in made))]
                for method, indices, copy in self.kvcache.calls]

    def free_list(self) -> list[int]:
        return free_list_of(self.allocator)

    def staged(self) -> list[int]:
        """need_sort's staged pages (spec §4.1)."""
        return staged_of(self.allocator)


def offloads(cls) -> bool:
    return all(callable(getattr(cls, name, None)) for name in ("get_cpu_copy", "load_cpu_copy"))
