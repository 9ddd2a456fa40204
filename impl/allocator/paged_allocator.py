"""`PagedAllocator`: the paged KV-cache allocator object with upstream `PagedTokenToKVPoolAllocator`'s
interface (spec §4, §10), slots from the vectorized `impl/paged/vectorized.py`. Page 0 is reserved.

Debug checks (env `SGLANG_DEBUG_MEMORY_POOL`, as upstream, or `debug=`) validate every call BEFORE
changing state, so a rejected call (`MisuseError`) leaves the allocator exactly as it was.
"""

from __future__ import annotations

import os

import torch

from kvfuzz.impl.paged import vectorized as paged_torch


class MisuseError(AssertionError):
    """A caller bug caught by the debug checks; an AssertionError, like upstream's debug asserts."""


class PagedAllocator:
    def __init__(self, size: int, page_size: int, dtype, device, kvcache=None,
                 need_sort: bool = False, *, debug: bool | None = None):
        self.size, self.page_size, self.dtype, self.device = size, page_size, dtype, device
        self._kvcache, self.need_sort = kvcache, need_sort
        self.num_pages = size // page_size
        if debug is None:
            debug = os.environ.get("SGLANG_DEBUG_MEMORY_POOL", "").lower() in ("1", "true")
        self.debug_mode = debug
        self.clear()

    def clear(self) -> None:
        self.free_pages = torch.arange(1, self.num_pages + 1, dtype=torch.int64, device=self.device)
        self.staged_pages: list[torch.Tensor] = []  # need_sort: released, unsorted, not yet merged
        self.num_staged_pages = 0
        self.free_group: list[torch.Tensor] | None = None
        self.free_page_ids_group: list[torch.Tensor] = []

    def available_size(self) -> int:
        return (len(self.free_pages) + self.num_staged_pages) * self.page_size

    def get_all_free_pages(self) -> torch.Tensor:
        return torch.cat((self.free_pages, *self.staged_pages))

    def merge_and_sort_free(self) -> None:
        if self.staged_pages:
            self.free_pages = torch.sort(self.get_all_free_pages()).values
            self.staged_pages, self.num_staged_pages = [], 0

    def alloc(self, need_size: int):
        num = need_size // self.page_size
        if self.debug_mode and need_size % self.page_size:
            raise MisuseError(f"alloc({need_size}) is not a multiple of page size {self.page_size}")
        if num > len(self.free_pages):
            self.merge_and_sort_free()
        if num > len(self.free_pages):
            return None
        pages, self.free_pages = self.free_pages[:num], self.free_pages[num:]
        offsets = torch.arange(self.page_size, device=self.device)
        return (pages[:, None] * self.page_size + offsets).reshape(-1)

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens: int, num_new_pages: int | None = None):
        P = self.page_size
        if self.debug_mode:
            self._check_alignment((last_loc + 1) % P != prefix_lens % P, "extend", last_loc,
                                  prefix_lens, "prefix_len", 1)
        bs = len(prefix_lens)
        # Each request opens at most extend_len // P + 1 pages, so this bound proves the head deep
        # enough without reading a length; only past it do we pay for the exact count first.
        bound = extend_num_tokens // P + bs + 1
        if bound > len(self.free_pages):
            self.merge_and_sort_free()
        if bound > len(self.free_pages):
            if num_new_pages is None:
                num_new_pages = self._extend_pages(prefix_lens_cpu, seq_lens_cpu)
            if num_new_pages > len(self.free_pages):
                return None
        out = torch.empty((extend_num_tokens,), dtype=torch.int64, device=self.device)
        paged_torch.alloc_extend(prefix_lens, seq_lens, last_loc, self.free_pages, out, P,
                                 self.device)
        if num_new_pages is None:
            num_new_pages = self._extend_pages(prefix_lens_cpu, seq_lens_cpu)
        self.free_pages = self.free_pages[num_new_pages:]
        return out

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):
        P = self.page_size
        if self.debug_mode:
            self._check_alignment((last_loc + 2) % P != seq_lens % P, "decode", last_loc,
                                  seq_lens, "seq_len", 2)
        bs = len(seq_lens)
        if bs > len(self.free_pages):
            self.merge_and_sort_free()
        # Exact for every P (upstream's `seq % P == 1` says 0 for P == 1, spec §3).
        num_new_pages = int(((seq_lens_cpu - 1) % P == 0).sum())
        if num_new_pages > len(self.free_pages):
            return None
        out = torch.empty((bs,), dtype=torch.int64, device=self.device)
        paged_torch.alloc_decode(seq_lens, last_loc, self.free_pages, out, P, num_new_pages)
        self.free_pages = self.free_pages[num_new_pages:]
        return out

    def free(self, free_index: torch.Tensor) -> None:
        """Release every page any index touches, whole, once per call."""
        if free_index.numel() == 0:
            return
        if self.free_group is not None:
            self.free_group.append(free_index.clone())  # the caller may reuse its view
            return
        self._release(torch.unique(free_index // self.page_size))

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        """`kv_row[start_pos:...]` of one request, start page-aligned: one slot per page, no sync."""
        if free_index.numel() == 0:
            return
        if start_pos % self.page_size:
            raise MisuseError(f"segment start {start_pos} is not a multiple of {self.page_size}")
        strided = free_index[::self.page_size] // self.page_size
        if self.debug_mode and not torch.equal(torch.sort(strided).values,
                                               torch.unique(free_index // self.page_size)):
            raise MisuseError("segment is not a row's tail: its every page_size-th slot misses "
                              "a page it touches")
        self.free_page_ids(strided)

    def free_segments(self, segments) -> None:
        """Several `(free_index, start_pos)` segments of one request's row, each as
        `free_segment`; empty ones skipped, and a segment that shares a page with the one before
        it refused when reached (the ones before it stay freed, as upstream's)."""
        previous_end = None
        for free_index, start_pos in segments:
            count = free_index.numel()
            if count == 0:
                continue
            if previous_end is not None and \
                    start_pos // self.page_size <= (previous_end - 1) // self.page_size:
                raise MisuseError(f"segment at {start_pos} shares a page with the one ending at "
                                  f"{previous_end}")
            previous_end = start_pos + count
            self.free_segment(free_index, start_pos=start_pos)

    def free_page_ids(self, page_ids: torch.Tensor) -> None:
        """Release exactly these pages (no dedup: each page at most once per group)."""
        if page_ids.numel() == 0:
            return
        if self.free_group is not None:
            self.free_page_ids_group.append(page_ids.clone())
            return
        self._release(page_ids.clone() if self.need_sort else page_ids)  # staged: kept, so owned

    def free_group_begin(self) -> None:
        if self.free_group is not None:
            raise MisuseError("free groups cannot be nested")
        self.free_group, self.free_page_ids_group = [], []

    def free_group_end(self) -> None:
        pending, self.free_group = self.free_group or [], None
        ids, self.free_page_ids_group = self.free_page_ids_group, []
        # The group is closed before the check: a rejected group end releases nothing.
        parts = [torch.unique(torch.cat(pending) // self.page_size)] if pending else []
        parts += [torch.cat(ids)] if ids else []
        if parts and self.debug_mode:
            self._check_release(torch.cat(parts))
        for part in parts:
            self._release(part, check=False)

    def _release(self, page_ids: torch.Tensor, check: bool = True) -> None:
        if check and self.debug_mode:
            self._check_release(page_ids)
        if self.need_sort:
            self.staged_pages.append(page_ids)
            self.num_staged_pages += page_ids.numel()
        else:
            self.free_pages = torch.cat((page_ids, self.free_pages))

    def _extend_pages(self, prefix_lens_cpu, seq_lens_cpu) -> int:
        P = self.page_size
        return int(((seq_lens_cpu + P - 1) // P - (prefix_lens_cpu + P - 1) // P).sum())

    def _check_alignment(self, bad, call, last_loc, lens, name, plus) -> None:
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise MisuseError(f"{call} alignment: request {i} has (last_loc {int(last_loc[i])} + "
                              f"{plus}) % {self.page_size} != {name} {int(lens[i])} % {self.page_size}")

    def _check_release(self, page_ids: torch.Tensor) -> None:
        # Debug only: these reads sync with the device, as upstream's debug asserts do.
        ids = page_ids.tolist()
        free = set(self.get_all_free_pages().tolist())
        for page in ids:
            if not 1 <= page <= self.num_pages:
                raise MisuseError(f"release of page {page}: outside the pool 1..{self.num_pages}"
                                  + (" (page 0 is the reserved padding page)" if page == 0 else ""))
        if len(set(ids)) != len(ids):
            raise MisuseError(f"double free: a page released twice in one call: {sorted(ids)[:8]}")
        again = sorted(free.intersection(ids))
        if again:
            raise MisuseError(f"double free: pages already free: {again[:8]}")
