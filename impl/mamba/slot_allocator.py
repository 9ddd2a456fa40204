"""kvfuzz's own Mamba state-slot allocator, with upstream `MambaSlotAllocator`'s interface: a free
list of slot ids (slot 0 reserved), alloc groups that pre-allocate a batch for match_prefix.
Unlike upstream 0.5.23 it keeps every slot accounted for when the group protocol is misused: a
begin inside an open group ends it first, and `clear()` ends any group (oracle/mamba/model.py)."""

from __future__ import annotations

import torch


class MambaSlots:
    def __init__(self, size: int, device: str):
        self.size, self.device = size, device
        self.clear()

    def clear(self) -> None:
        self.free_slots = torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device)
        self._pending: torch.Tensor | None = None  # the open group's unused slots; None: closed

    def available_size(self) -> int:
        return len(self.free_slots)

    def schedulable_available_size(self) -> int:
        return self.available_size()

    def alloc_group_begin(self, num_reqs: int) -> None:
        self.alloc_group_end()
        taken = self._take(num_reqs) if num_reqs > 0 else None
        self._pending = taken if taken is not None else self.free_slots[:0]

    def alloc_group_end(self) -> None:
        if self._pending is not None:
            self.free(self._pending)
        self._pending = None

    def alloc(self, need_size: int) -> torch.Tensor | None:
        if self._pending is not None and need_size == 1 and len(self._pending):
            slot, self._pending = self._pending[:1], self._pending[1:]
            return slot
        return self._take(need_size)

    def _take(self, count: int) -> torch.Tensor | None:
        if count > len(self.free_slots):
            return None
        taken, self.free_slots = self.free_slots[:count], self.free_slots[count:]
        return taken

    def free(self, free_index: torch.Tensor) -> None:
        if free_index.numel():
            self.free_slots = torch.cat((self.free_slots, free_index))
