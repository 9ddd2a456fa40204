"""Calls a Mamba slot allocator with upstream `MambaSlotAllocator`'s interface in plain ints: lists
go in as tensors, results come out with one `.tolist()` after each call. Tensors stay here.
After every call the driver writes `POISON` over each tensor it passed in (the caller owns it)."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import TensorDriver, int_list


class MambaDriver(TensorDriver):
    def __init__(self, cls, size: int, device: str = "cpu"):
        self.device = device
        self.allocator = cls(size, device)

    def free_slots(self, slots) -> None:
        self._release("free", slots)

    def group_begin(self, count: int) -> None:
        self.allocator.alloc_group_begin(count)

    def group_end(self) -> None:
        self.allocator.alloc_group_end()

    def free_list(self) -> list[int]:
        return int_list(self.allocator.free_slots)
