"""The swa lock step's driver over a live SGLang `SWATokenToKVPoolAllocator` an engine is using
(`kvfuzz.guard(allocator, "swa")`, `fuzz/swa/guard.py`): each call the engine makes is made
when the lock step reaches it, exactly once, with the engine's own tensors (`LiveCalls`);
results come back as plain ints, and the state (sizes, both pools' free lists and staged pages,
the mapping) is read from the live allocator as the batch driver reads it."""

from __future__ import annotations

from kvfuzz.impl.changed_reads import ChangedReads
from kvfuzz.impl.driver_calls import int_list
from kvfuzz.impl.live_calls import LiveSlotCalls
from kvfuzz.impl.swa.driver import SWADriver


class LiveSWADriver(ChangedReads, LiveSlotCalls):
    state = SWADriver.state  # the same reads as a replay's
    state_since = SWADriver.state_since

    def alloc_extend(self, prefix_lens, seq_lens, last_loc):
        return int_list(self._perform("alloc_extend", (list(prefix_lens), list(seq_lens),
                                                       list(last_loc))))

    def alloc_extend_swa_tail(self, prefix_lens, seq_lens, last_loc, tail: int):
        return int_list(self._perform("alloc_extend_swa_tail", (
            list(prefix_lens), list(seq_lens), list(last_loc), tail)))

    def alloc_decode(self, seq_lens, last_loc):
        return int_list(self._perform("alloc_decode", (list(seq_lens), list(last_loc))))

    # One driver method per release the engine makes: the lock step names the call.
    def free(self, slots) -> None:
        self._perform("free", (list(slots),))

    def free_swa(self, slots) -> None:
        self._perform("free_swa", (list(slots),))

    def free_full(self, slots) -> None:
        self._perform("free_full", (list(slots),))

    def free_segments(self, segments) -> None:
        self._perform("free_segments", (_plain(segments),))

    def free_swa_segments(self, segments) -> None:
        self._perform("free_swa_segments", (_plain(segments),))

    def free_full_segments(self, segments) -> None:
        self._perform("free_full_segments", (_plain(segments),))

    def full_pool_free(self, slots) -> None:
        self._perform("full_pool_free", (list(slots),))

    def swa_pool_free(self, slots) -> None:
        self._perform("swa_pool_free", (list(slots),))

    def full_pool_free_segments(self, segments) -> None:
        self._perform("full_pool_free_segments", (_plain(segments),))

    def swa_pool_free_segments(self, segments) -> None:
        self._perform("swa_pool_free_segments", (_plain(segments),))

    def set_mapping(self, full, swa) -> None:
        self._perform("set_mapping", (list(full), list(swa)))

    def clear_mapping(self, full) -> None:
        self._perform("clear_mapping", (list(full),))

    def group_begin(self) -> None:
        self._perform("group_begin", ())

    def resize(self, size: int, size_swa: int) -> None:
        self._perform("resize", (size, size_swa))


def _plain(segments) -> list[tuple[list[int], int]]:
    return [(list(slots), start) for slots, start in segments]
