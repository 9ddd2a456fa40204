"""kvfuzz's token allocator (page size 1) with upstream `TokenToKVPoolAllocator`'s release order:
what is freed is appended to the tail of the free list in the order given, without dedup, and
a free group releases its chunks with one free at its end. The SWA allocator uses it for both
pools at page size 1, as upstream does."""

from __future__ import annotations

import torch

from kvfuzz.impl.allocator.paged_allocator import PagedAllocator


class TokenPool(PagedAllocator):
    def __init__(self, size: int, dtype, device, kvcache=None, need_sort: bool = False):
        super().__init__(size, 1, dtype, device, kvcache, need_sort, debug=False)

    def free(self, free_index: torch.Tensor) -> None:
        if free_index.numel() == 0:
            return
        if self.free_group is not None:
            self.free_group.append(free_index.clone())  # the caller may reuse its view
            return
        self._release(free_index.clone())

    def free_page_ids(self, page_ids: torch.Tensor) -> None:  # page ids are slots
        self.free(page_ids)

    def free_segment(self, free_index: torch.Tensor, *, start_pos: int) -> None:
        self.free(free_index)

    def free_group_end(self) -> None:
        pending, self.free_group = self.free_group or [], None
        self.free_page_ids_group = []
        if pending:
            self._release(torch.cat(pending))

    def _release(self, page_ids: torch.Tensor, check: bool = True) -> None:
        if self.need_sort:
            self.staged_pages.append(page_ids)
            self.num_staged_pages += page_ids.numel()
        else:
            self.free_pages = torch.cat((self.free_pages, page_ids))
