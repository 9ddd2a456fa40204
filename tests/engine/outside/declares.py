"""Classes that declare what they support, as a user writes it (`__kvfuzz__`)."""

import torch

from kvfuzz.impl.allocator.mutants import FreeWithoutDedup
from kvfuzz.impl.allocator.paged_allocator import PagedAllocator


class NoPageSizeOne(PagedAllocator):
    """Correct for page sizes 2 and up; at page size 1 it hands out the padding page. Declared,
    it never gets a page-size-1 trace; not declared, it diverges."""

    __kvfuzz__ = {"preconditions": ["page_size_2_up"]}

    def clear(self):
        super().clear()
        if self.page_size == 1:
            self.free_pages = torch.arange(0, self.num_pages, dtype=torch.int64,
                                           device=self.device)


class Undeclared(NoPageSizeOne):
    __kvfuzz__ = None


class DeclaresNonsense(PagedAllocator):
    __kvfuzz__ = {"preconditions": ["works_on_tuesdays"]}


class DeclaresBadly(PagedAllocator):
    __kvfuzz__ = ["page_size_2_up"]


class DedupBugDeclared(FreeWithoutDedup):
    """A real bug (free without dedup) behind a declaration: still caught."""

    __kvfuzz__ = {"preconditions": ["page_size_2_up"]}
