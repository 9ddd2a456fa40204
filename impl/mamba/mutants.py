"""Broken variants of `slot_allocator.MambaSlots`, one fault each; the Mamba tests prove the lock
step catches every one with a readable report."""

from __future__ import annotations

from kvfuzz.impl.mamba.slot_allocator import MambaSlots


class GroupEndLeaks(MambaSlots):
    """`alloc_group_end` forgets the group's unused pre-allocated slots instead of freeing them."""

    def alloc_group_end(self):
        self._pending = None


class ExactFitRefused(MambaSlots):
    """An allocation of exactly the free slots is refused (`>=` for `>`)."""

    def _take(self, count):
        if count and count >= len(self.free_slots):
            return None
        return super()._take(count)


class FreeKeepsCallerTensor(MambaSlots):
    """`free` into an empty free list adopts the caller's tensor instead of copying it (a "no cat
    needed" shortcut): whatever the caller writes there next lands on the free list."""

    def free(self, free_index):
        if free_index.numel() and not len(self.free_slots):
            self.free_slots = free_index
            return
        super().free(free_index)
