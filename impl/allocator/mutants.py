"""Broken variants of `paged_allocator.PagedAllocator`, one fault each; the allocator tests
prove the stateful differential catches every one with a readable report."""

from __future__ import annotations

import torch

from kvfuzz.impl.allocator.paged_allocator import PagedAllocator


class FreeWithoutDedup(PagedAllocator):
    """`free` releases `index // P` without `unique`: a page freed by P slots is listed P times."""

    def free(self, free_index):
        if free_index.numel() == 0:
            return
        if self.free_group is not None:
            self.free_group.append(free_index.clone())
            return
        self._release(free_index // self.page_size)


class LostAtMerge(PagedAllocator):
    """The merge sorts the free list with every staged chunk but the last: those pages vanish."""

    def merge_and_sort_free(self):
        if self.staged_pages:
            self.free_pages = torch.sort(torch.cat((self.free_pages, *self.staged_pages[:-1]))).values
            self.staged_pages, self.num_staged_pages = [], 0


class FailedAllocAdvances(PagedAllocator):
    """A failed `alloc`/`alloc_extend` still pops what the head had before returning None."""

    def alloc(self, need_size):
        out = super().alloc(need_size)
        if out is None:
            self.free_pages = self.free_pages[need_size // self.page_size:]
        return out

    def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                     extend_num_tokens, num_new_pages=None):
        out = super().alloc_extend(prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu, last_loc,
                                   extend_num_tokens, num_new_pages)
        if out is None:
            self.free_pages = self.free_pages[self._extend_pages(prefix_lens_cpu, seq_lens_cpu):]
        return out


class PaddingPageHandedOut(PagedAllocator):
    """`clear` seeds pages 0..N-1 instead of 1..N: same count, but the padding page is handed out."""

    def clear(self):
        super().clear()
        self.free_pages = torch.arange(0, self.num_pages, dtype=torch.int64, device=self.device)


class GroupKeepsCallerTensor(PagedAllocator):
    """Inside a free group, `free` keeps the caller's tensor instead of a copy: a scheduler that
    reuses its request-to-token row before the group ends releases whatever it wrote there."""

    def free(self, free_index):
        if self.free_group is not None and free_index.numel():
            self.free_group.append(free_index)
            return
        super().free(free_index)


class NestedGroupRestarts(PagedAllocator):
    """A nested `free_group_begin` starts the group afresh instead of being rejected: what the
    open group held is never released."""

    def free_group_begin(self):
        self.free_group, self.free_page_ids_group = [], []
