"""Calls a Mamba slot allocator with upstream `MambaSlotAllocator`'s interface in plain ints: lists
go in as tensors, results come out with one `.tolist()` after each call. Tensors stay here.
After every call the driver writes `POISON` over each tensor it passed in (the caller owns it).
A class built as a state pool (SGLang's `MambaPool` before 0.5.13) is built by `state_pool.py`."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import TensorDriver, int_list
from kvfuzz.impl.mamba.state_pool import build


class MambaDriver(TensorDriver):
    def __init__(self, cls, size: int, device: str = "cpu"):
        self.device = device
        self.allocator = build(cls, size, device)

    def free_slots(self, slots) -> None:
        self._release("free", slots)

    def group_begin(self, count: int) -> None:
        self.allocator.alloc_group_begin(count)

    def group_end(self) -> None:
        self.allocator.alloc_group_end()

    def free_list(self) -> list[int]:
        return int_list(self.allocator.free_slots)

    def schedulable_available_size(self) -> int | None:
        """The planner's free count (SGLang's `alloc_req_slots` admits by it); None for a class
        without it (releases before it existed)."""
        return schedulable_of(self.allocator)


def schedulable_of(allocator) -> int | None:
    read = getattr(allocator, "schedulable_available_size", None)
    return None if read is None else int(read())
