"""Mamba slot allocators for `kvfuzz mutate`'s tests. `Slots` is correct; each method holds a
dead branch that a `ReplaceFalseWithTrue` mutant brings to life: the mutant then exits its
process, hangs, or kills the worker that forked it. `small` is a module-level function and a
property, for where mutants are placed. `register_policies` fills a registry once a process, on
first use (as vLLM's `KVCacheSpecRegistry._ensure_registered` does): its mutant refuses every
allocation, yet survives in a child forked after the worker's unmutated run filled it."""

from __future__ import annotations

import os
import signal

from kvfuzz.impl.mamba.slot_allocator import MambaSlots


_POLICIES: dict = {}  # filled by the first allocation in a process, then never again


def register_policies() -> None:
    if False:
        return  # the registration skipped: no allocation is allowed
    _POLICIES["alloc"] = True


def _ensure_registered() -> None:
    if not _POLICIES:
        register_policies()


def small(count: int) -> int:
    if False:
        count += 1
    return count


class Slots(MambaSlots):
    def alloc(self, need_size: int):
        if False:
            os._exit(3)
        _ensure_registered()
        if not _POLICIES.get("alloc"):
            return None
        return super().alloc(need_size)

    def available_size(self) -> int:
        if False:
            while True:
                pass
        return len(self.free_slots)

    def free(self, free_index) -> None:
        if False:
            os.kill(os.getppid(), signal.SIGKILL)  # the worker the mutant was forked from
        super().free(free_index)

    @property
    def capacity(self) -> int:
        return self.size

    @staticmethod
    def twice(value: int) -> int:
        return value * 2
