"""kvfuzz's hybrid full + sliding-window allocator, upstream `SWATokenToKVPoolAllocator`'s
interface: a full pool and an SWA pool (paged allocators; token pools at page size 1) and the
full-to-SWA mapping, one int64 entry per full slot, 0 for "no SWA peer", ending in a -1 so that
translating last_loc -1 ("no prefix") gives -1. Vectorized torch; host reads: the allocation
pre-checks (host-side lengths) and the page dedup of set-shaped SWA frees.

Unlike the released class (see its profile), a decode that one pool cannot serve changes
nothing: both pools are checked before either allocates.

SGLang's switches are read when it is built: with SGLANG_DEBUG_MEMORY_POOL (above page size 1),
or SGLANG_INVARIANT_CHECK at 1 (warn) and up, a segment whose pages have no SWA peer (released
already) is refused; at 2 (strict), so is `free_full` of slots that still have one."""

from __future__ import annotations

import os

import torch

from kvfuzz.impl.allocator.paged_allocator import PagedAllocator
from kvfuzz.impl.swa.scheduler_api import SchedulerAPI
from kvfuzz.impl.swa.token_pool import TokenPool


class SWAAllocator(SchedulerAPI):
    def __init__(self, size: int, size_swa: int, page_size: int, dtype, device, kvcache,
                 need_sort: bool):
        self.page_size, self.device, self._kvcache = page_size, device, kvcache
        self.need_sort, self.dtype = need_sort, dtype
        self._size_full, self._size_swa = size, size_swa
        level = int(os.environ.get("SGLANG_INVARIANT_CHECK") or 0)
        debug = os.environ.get("SGLANG_DEBUG_MEMORY_POOL", "").lower() in ("1", "true")
        # the debug check compares pages, so it has nothing to see at page size 1
        self.check_peers = level >= 1 or (debug and page_size > 1)
        self.check_released = level >= 2
        if page_size == 1:
            self.full_attn_allocator = TokenPool(size, dtype, device, None, need_sort)
            self.swa_attn_allocator = TokenPool(size_swa, dtype, device, None, need_sort)
        else:
            self.full_attn_allocator = PagedAllocator(size, page_size, dtype, device, None,
                                                      need_sort, debug=False)
            self.swa_attn_allocator = PagedAllocator(size_swa, page_size, dtype, device, None,
                                                     need_sort, debug=False)
        self.full_to_swa_index_mapping = torch.zeros(size + page_size + 1, dtype=torch.int64,
                                                     device=device)
        self.full_to_swa_index_mapping[-1] = -1
        kvcache.register_mapping(self.full_to_swa_index_mapping)
        self.clear()


    def clear(self) -> None:
        self.full_attn_allocator.clear()
        self.swa_attn_allocator.clear()
        self.full_to_swa_index_mapping[:-1] = 0
        self.group_open = False
        self.swa_page_ids_group: list[torch.Tensor] = []
        self.swa_free_group: list[torch.Tensor] = []

    def available_size(self) -> int:
        return min(self.full_available_size(), self.swa_available_size())

    def full_available_size(self) -> int:
        return self.full_attn_allocator.available_size()

    def swa_available_size(self) -> int:
        return self.swa_attn_allocator.available_size()

    def _pages_available(self, num_pages: int) -> bool:
        return num_pages * self.page_size <= self.available_size()

    def _translate(self, last_loc: torch.Tensor) -> torch.Tensor:
        return self.full_to_swa_index_mapping[last_loc]

    def _map(self, full: torch.Tensor, swa: torch.Tensor) -> torch.Tensor:
        self.full_to_swa_index_mapping[full] = swa
        return full

    def alloc(self, need_size: int):
        assert self.page_size == 1, "alloc(n) is the page-size-1 call"
        if need_size > self.available_size():
            return None
        return self._map(self.full_attn_allocator.alloc(need_size),
                         self.swa_attn_allocator.alloc(need_size))

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens: int):
        P = self.page_size
        assert P > 1, "alloc_extend is a paged call: alloc at page size 1"
        pages = int(((seq_lens_cpu + P - 1) // P - (prefix_lens_cpu + P - 1) // P).sum())
        if not self._pages_available(pages):
            return None
        swa_last = self._translate(last_loc)
        full = self.full_attn_allocator.alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens,
                                                     seq_lens_cpu, last_loc, extend_num_tokens,
                                                     num_new_pages=pages)
        swa = self.swa_attn_allocator.alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens,
                                                   seq_lens_cpu, swa_last, extend_num_tokens,
                                                   num_new_pages=pages)
        return self._map(full, swa)

    def alloc_extend_swa_tail(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu,
                              last_loc, extend_num_tokens: int, swa_tail_len: int):
        """One request: full KV for the whole extend, SWA KV for its last `swa_tail_len` tokens."""
        P = self.page_size
        assert P > 1, "alloc_extend_swa_tail is a paged call"
        assert len(seq_lens_cpu) == 1 and len(prefix_lens_cpu) == 1, "one request at a time"
        assert 0 <= swa_tail_len <= extend_num_tokens, f"tail {swa_tail_len} outside the extend"
        full_pages = int(((seq_lens_cpu + P - 1) // P - (prefix_lens_cpu + P - 1) // P).sum())
        swa_pages = (swa_tail_len + P - 1) // P
        if full_pages * P > self.full_available_size() or \
                swa_pages * P > self.swa_available_size():
            return None
        full = self.full_attn_allocator.alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens,
                                                     seq_lens_cpu, last_loc, extend_num_tokens,
                                                     num_new_pages=full_pages)
        if swa_tail_len == 0:
            return full
        zero = torch.zeros(1, dtype=torch.int64)
        tail = torch.tensor([swa_tail_len], dtype=torch.int64)
        swa = self.swa_attn_allocator.alloc_extend(
            zero.to(self.device), zero, tail.to(self.device), tail,
            torch.full((1,), -1, dtype=torch.int64, device=self.device), swa_tail_len,
            num_new_pages=swa_pages)
        self.full_to_swa_index_mapping[full[:-swa_tail_len]] = 0
        self._map(full[-swa_tail_len:], swa)
        return full

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):
        assert self.page_size > 1, "alloc_decode is a paged call: alloc at page size 1"
        pages = int(((seq_lens_cpu - 1) % self.page_size == 0).sum())
        if not self._pages_available(pages):
            return None
        swa_last = self._translate(last_loc)
        full = self.full_attn_allocator.alloc_decode(seq_lens, seq_lens_cpu, last_loc)
        swa = self.swa_attn_allocator.alloc_decode(seq_lens, seq_lens_cpu, swa_last)
        return self._map(full, swa)

    def set_full_to_swa_mapping(self, full_indices: torch.Tensor,
                                swa_indices: torch.Tensor) -> None:
        """A prefix cache re-pairs full slots it keeps with SWA slots it holds."""
        self.full_to_swa_index_mapping[full_indices.to(torch.int64)] = swa_indices.to(torch.int64)

    def clear_full_to_swa_mapping(self, full_indices: torch.Tensor) -> None:
        self.full_to_swa_index_mapping.index_fill_(0, full_indices.to(torch.int64), 0)

    def _whole_pages(self, slots: torch.Tensor) -> torch.Tensor:
        """Every slot of each page `slots` touch, once: deduplicated first, so the expansion is
        at most the pool (upstream keeps duplicates, x page size, to avoid a GPU sync)."""
        P = self.page_size
        base = (torch.unique(slots // P) * P)[:, None]
        return (base + torch.arange(P, device=slots.device)[None, :]).reshape(-1)

    def _take_peers(self, slots: torch.Tensor) -> torch.Tensor:
        """The SWA peers of `slots` (a fresh tensor), their mapping cleared."""
        peers = self.full_to_swa_index_mapping[slots]
        self.full_to_swa_index_mapping.index_fill_(0, slots, 0)
        return peers

    def free_swa(self, free_index: torch.Tensor) -> None:
        if free_index.numel() == 0:
            return
        if self.page_size == 1:
            return self.free_swa_segment(free_index, start_pos=0)
        peers = self._take_peers(self._whole_pages(free_index))
        if self.group_open:
            self.swa_free_group.append(peers)
            return
        self.swa_attn_allocator.free(peers[peers > 0])

    def free_swa_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        if free_index.numel() == 0:
            return
        P = self.page_size
        assert start_pos % P == 0, f"segment start {start_pos} is not page-aligned"
        reps = free_index[::P]
        peers = self.full_to_swa_index_mapping[reps]
        if self.check_peers:
            assert bool((peers > 0).all()), "segment pages without an SWA peer: released already"
        pages = peers // P
        self._take_peers(self._whole_pages(reps) if P > 1 else reps)
        if self.group_open:
            self.swa_page_ids_group.append(pages)
            return
        self.swa_attn_allocator.free_page_ids(pages)

    def _check_released(self, free_index: torch.Tensor) -> None:
        if self.check_released:
            assert not bool(self.full_to_swa_index_mapping[free_index].any()), \
                "full slots released with an SWA peer still mapped: free() releases both"

    def free_full(self, free_index: torch.Tensor) -> None:
        if free_index.numel():
            self._check_released(free_index)
            self.full_attn_allocator.free(free_index)

    def free(self, free_index: torch.Tensor) -> None:
        if free_index.numel():
            self.free_swa(free_index)
            self.free_full(free_index)

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        if free_index.numel():
            self.free_swa_segment(free_index, start_pos=start_pos)
            self.full_attn_allocator.free_segment(free_index, start_pos=start_pos)

    def free_full_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        if free_index.numel():
            self._check_released(free_index)
            self.full_attn_allocator.free_segment(free_index, start_pos=start_pos)

    def free_segments(self, segments) -> None:
        """Several `(free_index, start_pos)` segments of one row, each `free_segment`."""
        for free_index, start_pos in self._page_disjoint(segments):
            self.free_segment(free_index, start_pos=start_pos)

    def free_full_segments(self, segments) -> None:
        for free_index, start_pos in self._page_disjoint(segments):
            self.free_full_segment(free_index, start_pos=start_pos)

    def _page_disjoint(self, segments):
        """The non-empty segments, each asserted to start past the page the one before ended in
        (every page is released once)."""
        P, previous_end = self.page_size, None
        for free_index, start_pos in segments:
            if free_index.numel():
                assert previous_end is None or start_pos // P > (previous_end - 1) // P, \
                    f"segment at {start_pos} shares a page with the one ending at {previous_end}"
                previous_end = start_pos + free_index.numel()
                yield free_index, start_pos

    def free_group_begin(self) -> None:
        assert not self.group_open, "free groups cannot be nested"
        self.group_open = True
        self.swa_page_ids_group, self.swa_free_group = [], []
        self.full_attn_allocator.free_group_begin()

    def free_group_end(self) -> None:
        self.group_open = False
        ids, self.swa_page_ids_group = self.swa_page_ids_group, []
        peers, self.swa_free_group = self.swa_free_group, []
        if ids:
            self.swa_attn_allocator.free_page_ids(torch.cat(ids))
        if peers:
            peers = torch.cat(peers)
            self.swa_attn_allocator.free(peers[peers > 0])
        self.full_attn_allocator.free_group_end()
