"""The "mamba" target: a Mamba state-slot allocator (upstream `MambaSlotAllocator`'s interface)
driven over scheduler-like traces, in lock step with the oracle (`lockstep.py`).

    kvfuzz diff mamba --cases 2000 --jobs 2
    kvfuzz diff mamba --impl sglang.srt.mem_cache.allocator.mamba:MambaSlotAllocator
Each implementation gets the traces it supports (the group-protocol misuse it declares it never
sees, strategies/mamba/profile.py); a trace from elsewhere that has such misuse is outside its
contract. Imports torch only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.mamba.lockstep import MambaLockstep
from kvfuzz.fuzz.trace_target import TraceTarget
from kvfuzz.impl.mamba import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.mamba import codec, generator
from kvfuzz.strategies.mamba.profile import broken, unsupported
from kvfuzz.strategies.mamba.trace import (FORMAT, Admit, AllocMany, Finish, Trace, describe_op,
                                           to_json)

METHODS = ("alloc", "free", "alloc_group_begin", "alloc_group_end", "clear", "available_size")


class MambaTarget(TraceTarget):
    name = "mamba"
    format = FORMAT
    judge = MambaLockstep
    broken_preconditions = staticmethod(broken)
    describe_op = staticmethod(describe_op)
    default_cases = 200
    shrink_budget = (3000, 20.0)
    worst_input = staticmethod(codec.worst_input)
    implementations = IMPLEMENTATIONS
    coverage_modules = ("kvfuzz.fuzz.mamba.lockstep", "kvfuzz.oracle.mamba.model")

    def validate(self, path, obj):
        check_shape(path, obj, 2, "a class with upstream MambaSlotAllocator's interface: "
                    "(size, device)", cls=True, methods=METHODS)

    def generator_for(self, impls):
        return generator.generator_for(frozenset().union(*(unsupported(impl.preconditions)
                                                           for impl in impls)))

    def describe(self, item):
        return [("pool", item.describe())]

    def fewer_parts(self, item: Trace):
        """The trace with one request taken out, the latest first."""
        rids = {op.rid for op in item.ops if isinstance(op, (Admit, AllocMany))}
        for rid in sorted(rids, reverse=True):
            yield replace(item, ops=tuple(op for op in (_without(op, rid) for op in item.ops)
                                          if op is not None))

    def size(self, item):
        return len(item.ops), item.size


def _without(op, rid: int):
    if getattr(op, "rid", None) == rid:
        return None
    if isinstance(op, Finish) and rid in op.rids:
        rids = tuple(r for r in op.rids if r != rid)
        return replace(op, rids=rids) if rids else None
    return op


MAMBA = MambaTarget(generator.GENERATOR, codec.from_json, to_json)
