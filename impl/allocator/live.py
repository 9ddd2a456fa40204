"""The allocator lock step's driver over a live SGLang-style allocator, one an engine's
scheduler is using (`kvfuzz.guard(allocator, "allocator")`, `fuzz/allocator/guard.py`): each
call the engine makes is handed over and made when the lock step reaches it, exactly once, with
the engine's own tensors (`LiveCalls`); results come back as plain ints, and the state (free
list, staged pages, available size) is read from the live allocator when the lock step asks."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import free_list_of, int_list, staged_of
from kvfuzz.impl.live_calls import LiveSlotCalls


class LiveAllocatorDriver(LiveSlotCalls):
    # -- the engine's calls, when the lock step reaches them (alloc, free, group end, clear:
    # `LiveSlotCalls`) --------------------------------------------------------------------------
    def alloc_extend(self, prefix_lens, seq_lens, last_loc, num_new_pages=None):
        return int_list(self._perform("alloc_extend", (list(prefix_lens), list(seq_lens),
                                                       list(last_loc), num_new_pages)))

    def alloc_decode(self, seq_lens, last_loc):
        return int_list(self._perform("alloc_decode", (list(seq_lens), list(last_loc))))

    def free_segments(self, segments) -> None:
        self._perform("free_segments", ([(list(s), start) for s, start in segments],))

    def free_page_ids(self, pages) -> None:
        self._perform("free_page_ids", (list(pages),))

    def group_begin(self) -> None:
        self._perform("group_begin", ())

    # -- reads -------------------------------------------------------------------------------
    def free_list(self) -> list[int]:
        return free_list_of(self.allocator)

    def staged(self) -> list[int]:
        return staged_of(self.allocator)
