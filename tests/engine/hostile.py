"""Hostile implementations for the isolation tests: each behaves on small batches and misbehaves
on batches of three requests or more, so a run has cases both ways. Importable by path
(`tests.engine.hostile:segfault`) from the repository root."""

from __future__ import annotations

import ctypes
import os
import signal
import stat
import subprocess
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
# SIGALRM taken over (libFuzzer's -timeout rides on it), then an endless wait
hangs_alarm_taken = _hostile(lambda out: (signal.signal(signal.SIGALRM, signal.SIG_IGN),
                                          time.sleep(3600)))
resizes = _hostile(lambda out: out.resize_(out.shape[0] + 1))


def _to_every_socket(data: bytes):
    """Write `data` to every socket this process holds: the worker's pipe among them."""
    for name in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                os.write(int(name), data)
        except OSError:
            pass


junk_on_pipe = _hostile(lambda out: _to_every_socket(b"\x00\x00\x00\x10not a frame at all"))
huge_header_on_pipe = _hostile(lambda out: _to_every_socket((1 << 30).to_bytes(4, "big")))
# a length the limit allows, then silence: the frame is never finished
unfinished_frame_on_pipe = _hostile(lambda out: _to_every_socket((1 << 20).to_bytes(4, "big")))


def _marked_sleep() -> list[str]:
    """A command line the tests can find among the running processes (they set the mark)."""
    return ["sleep", os.environ.get("KVFUZZ_TEST_MARK", "600")]


def _fork_and_stay(out):
    if os.fork() == 0:
        os.execvp("sleep", _marked_sleep())


def _double_fork_away(out):
    if os.fork() == 0:  # a daemon the classic way: fork, setsid, fork, the middle one exits
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", _marked_sleep())
        os._exit(0)
    os.wait()


# Correct results, and a process left running on every call of three requests or more
leaves_child = _hostile(lambda out: subprocess.Popen(_marked_sleep()))
leaves_session = _hostile(lambda out: subprocess.Popen(_marked_sleep(), start_new_session=True))
leaves_fork = _hostile(_fork_and_stay)
leaves_daemon = _hostile(_double_fork_away)


def _pool_sum(out):
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert sum(pool.map(abs, range(4))) == 6


uses_pool = _hostile(_pool_sum)  # correct: a Pool inside an implementation works


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


class MambaInt32(MambaSlots):
    """Right slots, as an int32 tensor: the contract's slots are int64."""

    def alloc(self, need_size):
        slots = super().alloc(need_size)
        return None if slots is None else slots.to(torch.int32)


# -- what reaches past the implementation in one process: torch, the memory ------------------
_CUMSUM = torch.cumsum


def _off_by_one_cumsum(*args, **kwargs):
    return _CUMSUM(*args, **kwargs) + 1


def patches_torch(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    """Correct itself, it leaves torch.cumsum off by one for whatever runs after it."""
    torch.cumsum = _CUMSUM
    try:
        correct(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)
    finally:
        torch.cumsum = _off_by_one_cumsum


_KEPT = []  # what leaks_memory never lets go of
# 256 MiB more resident memory on every batch of three requests or more
leaks_memory = _hostile(lambda out: _KEPT.append(torch.ones(1 << 26, dtype=torch.float32)))
# one allocation far past any limit
allocates_too_much = _hostile(lambda out: torch.ones(1 << 40, dtype=torch.uint8))


# -- where it failed: crash reports and the in-process replay ---------------------------------
class SegfaultsOnMerge(PagedAllocator):
    """An allocator that segfaults when its need_sort pages are merged (mid-trace)."""

    def merge_and_sort_free(self):
        if self.staged_pages:
            ctypes.string_at(0)
        super().merge_and_sort_free()


class RaisesOnMerge(PagedAllocator):
    """An allocator that raises when its need_sort pages are merged (mid-trace)."""

    def merge_and_sort_free(self):
        if self.staged_pages:
            raise RuntimeError(f"refusing to merge {len(self.staged_pages)} staged pages")
        super().merge_and_sort_free()
