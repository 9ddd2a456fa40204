"""Calls a Mamba slot allocator with upstream `MambaSlotAllocator`'s interface in plain ints: lists
go in as tensors, results come out with one `.tolist()` after each call. Tensors stay here.
After every call the driver writes `POISON` over each tensor it passed in (the caller owns it)."""

from __future__ import annotations

import torch

from kvfuzz.impl.driver_calls import int_list, then_poison


class MambaDriver:
    def __init__(self, cls, size: int, device: str = "cpu"):
        self.device = device
        self.allocator = cls(size, device)

    def alloc(self, need_size: int):
        return int_list(self.allocator.alloc(need_size))

    def free_slots(self, slots) -> None:
        index = torch.tensor(list(slots), dtype=torch.int64, device=self.device)
        then_poison(self.allocator.free(index), index)

    def group_begin(self, count: int) -> None:
        self.allocator.alloc_group_begin(count)

    def group_end(self) -> None:
        self.allocator.alloc_group_end()

    def clear(self) -> None:
        self.allocator.clear()

    def available_size(self) -> int:
        return int(self.allocator.available_size())

    def free_list(self) -> list[int]:
        return int_list(self.allocator.free_slots)
