"""`kvfuzz.guard` and `kvfuzz.record` of a live SGLang `MambaSlotAllocator` (one state slot per
request): the allocator an engine's Mamba pool calls, wrapped so that each call becomes an op
of a `mamba` trace as it happens and, guarding, is checked in lock step with the oracle: the
slots handed out, `available_size`, the free list in order, and the invariants (every slot
free, pre-allocated by a group or held, once; slot 0 never).

The engine's calls map onto the trace's ops: `alloc(n)`: `alloc` of n for a holder of its own
(inside an alloc group, n == 1 takes a pre-allocated slot, as the oracle models it);
`free(slots)`: `free_slots` (the engine frees slots, not requests); `alloc_group_begin(n)`,
`alloc_group_end()`, `clear()`: the trace's ops of those names. Reads go through
(`available_size`, `schedulable_available_size`, every attribute). Refused (`GuardUnsupported`,
before the call): any other method that changes the allocator, a pool larger than the format
holds (2^16 slots) or used before it was guarded.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.guard import (GuardedObject, GuardUnsupported, Session, modelled,
                                      open_session, plain_ints, same_args)
from kvfuzz.strategies.mamba.codec import MAX_SIZE
from kvfuzz.strategies.mamba.trace import AllocMany, Clear, FreeSlots, GroupBegin, GroupEnd, Trace

READS = frozenset({"available_size", "schedulable_available_size"})
# Where SGLang builds its Mamba slot allocator (`kvfuzz guard mamba -- COMMAND`).
SITES = ("sglang.srt.mem_cache.memory_pool:MambaSlotAllocator",
         "sglang.srt.mem_cache.mamba_checkpoint_pool:MambaSlotAllocator")


def header(allocator) -> Trace:
    """The trace's settings, read from the live allocator, which must be as new."""
    size = int(allocator.size)
    if not 1 <= size <= MAX_SIZE:
        raise GuardUnsupported(f"kvfuzz.guard(mamba): a pool of {size} slots: the trace holds "
                               f"at most {MAX_SIZE}")
    if int(allocator.available_size()) < size or \
            getattr(allocator, "_alloc_iter", None) is not None:
        raise GuardUnsupported("kvfuzz.guard(mamba): the allocator has been used: guard it "
                               "before its first call (the oracle starts from a full free list)")
    return Trace(size, ())


def guard(allocator, *, check: bool = True, impl=None, corpus="corpus",
          on_unsupported: str = "raise"):
    """The live `allocator`, wrapped: checked in lock step with the oracle (`check`), or only
    recorded. `impl` names it in reports (default: its class's catalogue entry). A call the
    trace cannot model raises `GuardUnsupported` (`on_unsupported="raise"`), or, with "stop",
    is said once on stderr and goes through, and so does every call after it, unchecked."""
    trace = header(allocator)
    driver = None
    if check:
        from kvfuzz.impl.mamba.live import LiveMambaDriver

        driver = LiveMambaDriver(allocator)
    session = open_session("mamba", allocator, trace, driver, impl, corpus, on_unsupported)
    return GuardedMamba(allocator, session, driver)


class GuardedMamba(GuardedObject):
    """Stands for the allocator: the engine's calls go through `kvfuzz_session`."""

    TARGET, READS = "mamba", READS

    def __init__(self, allocator, session: Session, driver):
        super().__init__(allocator, session, driver)
        vars(self)["_kvfuzz_next_rid"] = 0  # each alloc is a holder of its own

    @modelled
    def alloc(self, need_size):
        allocator = self._kvfuzz_object
        n = self._count(need_size, "alloc", MAX_SIZE)
        rid = self._kvfuzz_next_rid
        vars(self)["_kvfuzz_next_rid"] = rid + 1
        return self._run(AllocMany(rid, n), "alloc", lambda: allocator.alloc(need_size),
                         same_args((n,)))

    @modelled
    def free(self, free_index):
        allocator = self._kvfuzz_object
        slots = plain_ints(free_index)
        if len(slots) > MAX_SIZE or any(not 0 <= v <= MAX_SIZE for v in slots):
            self._refuse(f"free of {len(slots)} values outside 0..{MAX_SIZE}")
        return self._run(FreeSlots(tuple(slots)), "free_slots",
                         lambda: allocator.free(free_index), same_args((slots,)))

    @modelled
    def alloc_group_begin(self, num_reqs):
        allocator = self._kvfuzz_object
        n = self._count(num_reqs, "alloc_group_begin", MAX_SIZE)
        return self._run(GroupBegin(n), "group_begin",
                         lambda: allocator.alloc_group_begin(num_reqs), same_args((n,)))

    @modelled
    def alloc_group_end(self):
        allocator = self._kvfuzz_object
        return self._run(GroupEnd(), "group_end", allocator.alloc_group_end)

    @modelled
    def clear(self):
        allocator = self._kvfuzz_object
        return self._run(Clear(), "clear", allocator.clear)
