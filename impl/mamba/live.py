"""The mamba lock step's driver over a live SGLang `MambaSlotAllocator` an engine is using
(`kvfuzz.guard(allocator, "mamba")`, `fuzz/mamba/guard.py`): each call the engine makes is
made when the lock step reaches it, exactly once, with the engine's own tensors (`LiveCalls`);
results come back as plain ints, the free list is read from the live allocator."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import int_list
from kvfuzz.impl.live_calls import LiveSlotCalls


class LiveMambaDriver(LiveSlotCalls):
    def group_begin(self, count: int) -> None:
        self._perform("group_begin", (count,))

    def free_list(self) -> list[int]:
        return int_list(self.allocator.free_slots)

    def schedulable_available_size(self) -> int | None:
        from kvfuzz.impl.mamba.driver import schedulable_of

        return schedulable_of(self.allocator)
