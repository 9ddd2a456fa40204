"""The "swa" target: a hybrid full + sliding-window allocator (upstream
`SWATokenToKVPoolAllocator`'s interface) driven over scheduler-like traces, in lock step with the
oracle (`lockstep.py`).

    kvfuzz diff swa --cases 2000 --jobs 2
    kvfuzz diff swa --impl sglang.srt.mem_cache.allocator.swa:SWATokenToKVPoolAllocator
An implementation that declares it is only called after the scheduler's memory check gets traces
whose decodes are all checked (strategies/swa/profile.py); a trace from elsewhere with an
unchecked decode is outside its contract. Imports torch only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.swa.lockstep import SWALockstep
from kvfuzz.fuzz.trace_target import TraceTarget
from kvfuzz.impl.registry import check_shape
from kvfuzz.impl.swa import IMPLEMENTATIONS
from kvfuzz.strategies.swa import codec, generator
from kvfuzz.strategies.swa.profile import broken, checked_only
from kvfuzz.strategies.swa.trace import FORMAT, Decode, Extend, Trace, describe_op, to_json

METHODS = ("alloc", "alloc_extend", "alloc_extend_swa_tail", "alloc_decode", "free", "free_swa", "free_full",
           "free_segment", "free_swa_segment", "free_full_segment", "free_group_begin",
           "free_group_end", "clear", "available_size", "full_available_size",
           "swa_available_size")


class SWATarget(TraceTarget):
    name = "swa"
    format = FORMAT
    judge = SWALockstep
    broken_preconditions = staticmethod(broken)
    describe_op = staticmethod(describe_op)
    default_cases = 200
    shrink_budget = (3000, 20.0)
    worst_input = staticmethod(codec.worst_input)
    implementations = IMPLEMENTATIONS
    coverage_modules = ("kvfuzz.fuzz.swa.lockstep", "kvfuzz.oracle.swa.model")

    def validate(self, path, obj):
        check_shape(path, obj, 7, "a class with upstream SWATokenToKVPoolAllocator's interface: "
                    "(size, size_swa, page_size, dtype, device, kvcache, need_sort)", cls=True,
                    methods=METHODS)

    def generator_for(self, impls):
        return generator.generator_for(any(checked_only(impl.preconditions) for impl in impls))

    def describe(self, item):
        return [("pools", item.describe())]

    def fewer_parts(self, item: Trace):
        """The trace with one request taken out (the latest first), then with every decode
        checked (an unchecked one is rarely the point)."""
        rids = {r for op in item.ops for r in (*getattr(op, "rids", ()), getattr(op, "rid", -1))
                if r >= 0}
        for rid in sorted(rids, reverse=True):
            yield replace(item, ops=tuple(op for op in (_without(op, rid) for op in item.ops)
                                          if op is not None))
        if any(isinstance(op, Decode) and not op.checked for op in item.ops):
            yield replace(item, ops=tuple(replace(op, checked=True) if isinstance(op, Decode)
                                          else op for op in item.ops))

    def size(self, item):
        return len(item.ops), item.size + item.size_swa


def _without(op, rid: int):
    if getattr(op, "rid", None) == rid:
        return None
    if isinstance(op, Extend) and rid in op.rids:
        kept = [(r, n) for r, n in zip(op.rids, op.lens) if r != rid]
        return replace(op, rids=tuple(r for r, _ in kept), lens=tuple(n for _, n in kept)) \
            if kept else None
    if isinstance(op, Decode) and rid in op.rids:
        rids = tuple(r for r in op.rids if r != rid)
        return replace(op, rids=rids) if rids else None
    return op


SWA = SWATarget(generator.GENERATOR, codec.from_json, to_json)
