"""Reference model of a Mamba state-slot allocator in plain lists, and the invariants a scheduler
relies on. The contract is upstream `MambaSlotAllocator`'s released source (sglang 0.5.23):

- `clear()`: slots 1..size free, in order. Slot 0 is the dummy write target of padded tokens
  and is never handed out.
- `alloc(n)`: inside an alloc group that has unused pre-allocated slots and n == 1, the next of
  them; otherwise the first n free slots, or None when fewer are free (nothing changes).
- `alloc_group_begin(k)`: pre-allocates the first k free slots (none when k is 0 or more than
  are free). They leave the free list: `available_size` does not count them.
- `alloc_group_end()`: the unused pre-allocated slots go back to the tail of the free list, in
  order; with no group open, nothing happens.
- `free(slots)`: appended to the tail of the free list, in the order given.
- `schedulable_available_size()`: the count the scheduler admits requests by; on this static
  pool it is `available_size()` (a shared, byte-coordinated pool reports its own view).

Where upstream's source leaves the group protocol to its caller, kvfuzz's verdict is what keeps
every slot accounted for: a begin inside an open group ends that group first (its unused slots
go back), and `clear()` inside a group ends it too. Upstream leaks the first group's unused
slots and, after a clear, still hands out the group's pre-allocated slots, which are free again
by then; its catalogue entry declares that its callers never do either
(strategies/mamba/profile.py).
"""

from __future__ import annotations

from collections import Counter


class MambaModel:
    def __init__(self, size: int):
        self.size = size
        self.clear()

    def clear(self) -> None:
        self.free = list(range(1, self.size + 1))  # head first
        self.pending: list[int] = []               # pre-allocated by the open group, unused
        self.open = False

    def available_size(self) -> int:
        return len(self.free)

    def alloc(self, need_size: int) -> list[int] | None:
        if self.open and need_size == 1 and self.pending:
            return [self.pending.pop(0)]
        return self._take(need_size)

    def _take(self, count: int) -> list[int] | None:
        if count > len(self.free):
            return None
        taken, self.free = self.free[:count], self.free[count:]
        return taken

    def group_begin(self, count: int) -> None:
        self.group_end()
        self.open = True
        self.pending = (self._take(count) or []) if count > 0 else []

    def group_end(self) -> None:
        self.free += self.pending
        self.pending, self.open = [], False

    def free_slots(self, slots: list[int]) -> None:
        self.free += list(slots)


def state_violations(size: int, free: list[int], pending: list[int],
                     holders: dict[int, int]) -> list[str]:
    """Every slot 1..size is exactly one of: free, pre-allocated by the open group, held by a
    live request; slot 0 is none of them. `holders`: slot -> the live rid holding it."""
    listed = free + pending + list(holders)
    if len(listed) == size and set(listed) == set(range(1, size + 1)):
        return []  # the common case, in one pass
    problems = []
    counts = Counter(free)
    if 0 in counts:
        problems.append("slot 0 (the reserved dummy slot) is on the free list")
    outside = sorted(s for s in counts if not 0 <= s <= size)
    if outside:
        problems.append(f"slots outside 1..{size} on the free list: {outside[:6]}")
    twice = sorted(s for s, n in counts.items() if n > 1)
    if twice:
        problems.append(f"{len(twice)} slots twice on the free list (double free), e.g. "
                        f"{twice[:6]}")
    held = sorted(s for s in counts if s in holders)
    if held:
        problems.append(f"{len(held)} slots free but held by live requests, e.g. slot {held[0]} "
                        f"held by r{holders[held[0]]}")
    lost = sorted(set(range(1, size + 1)) - set(free) - set(pending) - set(holders))
    if lost:
        problems.append(f"{len(lost)} slots neither free, pre-allocated nor held (lost), e.g. "
                        f"{lost[:6]}")
    return problems


def new_slot_violations(rid: int, slots: list[int], size: int,
                        holders: dict[int, int]) -> list[str]:
    """Slots just handed to `rid`: inside 1..size, each once, none held by a live request."""
    problems = [f"r{rid} got slot {s}, outside 1..{size}" for s in slots if not 1 <= s <= size]
    problems += [f"r{rid} got slot {s}, held by r{holders[s]}" for s in slots if s in holders]
    twice = sorted(s for s, n in Counter(slots).items() if n > 1)
    if twice:
        problems.append(f"r{rid} got slots twice in one call: {twice[:6]}")
    return problems[:6]
