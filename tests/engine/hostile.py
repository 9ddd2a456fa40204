"""Hostile implementations for the isolation tests: each behaves on small batches and misbehaves
on batches of three requests or more, so a run has cases both ways. Importable by path
(`tests.engine.hostile:segfault`) from the repository root."""

from __future__ import annotations

import ctypes
import os
import sys
import time

import torch

from kvfuzz.impl.allocator.paged_allocator import PagedAllocator
from kvfuzz.impl.mamba.slot_allocator import MambaSlots
from kvfuzz.impl.paged.vectorized import alloc_extend as correct


def _hostile(misbehave):
    def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
        correct(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)
        if prefix_lens.shape[0] >= 3:
            misbehave(out_indices)
    return alloc_extend


def _raise(error):
    raise error


segfault = _hostile(lambda out: ctypes.string_at(0))
aborts = _hostile(lambda out: os.abort())
exits = _hostile(lambda out: sys.exit(0))
exits_hard = _hostile(lambda out: os._exit(0))
interrupts = _hostile(lambda out: _raise(KeyboardInterrupt()))
hangs = _hostile(lambda out: time.sleep(3600))
resizes = _hostile(lambda out: out.resize_(out.shape[0] + 1))


def slow(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    """Correct, 20 ms a case: a run that is still going when a test interrupts it."""
    time.sleep(0.02)
    correct(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)


class ExitsOnMerge(PagedAllocator):
    """An allocator that ends the process when its need_sort pages are merged."""

    def merge_and_sort_free(self):
        if self.staged_pages:
            os._exit(3)
        super().merge_and_sort_free()


def retypes(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    """Right values, written into a float buffer it swapped in: 5 == 5.0 must not pass."""
    correct(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)
    out_indices.data = out_indices.data.to(float)


def garbage_snapshots(params, device="cpu"):
    """A compaction factory whose allocator reports its state as a plain dict."""
    from kvfuzz.impl.compaction.allocator import lazy

    side = lazy(params, device)
    side.snapshot = lambda name: {"wm": 0}
    return side


class NestedResults(PagedAllocator):
    """An allocator whose alloc returns a 2-D tensor of the right slots."""

    def alloc(self, need_size):
        out = super().alloc(need_size)
        return None if out is None else out.reshape(1, -1)


def slow_wrong(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    """250 ms a case, and wrong on batches of three requests or more: a run that finds it at
    once and then spends seconds shrinking it (each candidate costs the 250 ms again)."""
    time.sleep(0.25)
    correct(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)
    if prefix_lens.shape[0] >= 3 and out_indices.numel():
        out_indices[-1] += 1


class Unprintable(RuntimeError):
    """An exception whose message cannot be read: `str()` of it raises."""

    def __str__(self):
        raise ValueError("no message for you")


raises_unprintable = _hostile(lambda out: _raise(Unprintable()))


class MambaUnprintable(MambaSlots):
    """Raises an unprintable exception on the third allocation."""

    calls = 0

    def alloc(self, need_size):
        self.calls += 1
        if self.calls == 3:
            raise Unprintable()
        return super().alloc(need_size)


class LyingTensor(torch.Tensor):
    """A tensor whose `tolist()` says what the caller hoped to read."""

    def tolist(self):
        return self.hoped


class MambaLies(MambaSlots):
    """Hands out slots 1000 past the right ones, in a tensor whose `tolist()` says the right
    ones."""

    def alloc(self, need_size):
        right = super().alloc(need_size)
        if right is None:
            return None
        lie = (right + 1000).as_subclass(LyingTensor)
        lie.hoped = right.tolist()
        return lie
