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

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.fuzz.swa.lockstep import SWALockstep
from kvfuzz.impl.registry import check_shape
from kvfuzz.impl.swa import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.strategies.swa import codec, generator, uniform
from kvfuzz.strategies.swa.profile import broken, checked_only
from kvfuzz.strategies.swa.trace import FORMAT, Decode, describe_op, to_json

METHODS = ("alloc", "alloc_extend", "alloc_extend_swa_tail", "alloc_decode", "free", "free_swa",
           "free_full", "free_segment", "free_swa_segment", "free_full_segment",
           "free_group_begin", "free_group_end", "clear", "available_size",
           "full_available_size", "swa_available_size")


def _shape(path, obj):
    check_shape(path, obj, 7, "a class with upstream SWATokenToKVPoolAllocator's interface: "
                "(size, size_swa, page_size, dtype, device, kvcache, need_sort)", cls=True,
                methods=METHODS)


def _every_decode_checked(item):
    """An unchecked decode is rarely the point."""
    if any(isinstance(op, Decode) and not op.checked for op in item.ops):
        yield replace(item, ops=tuple(replace(op, checked=True) if isinstance(op, Decode)
                                      else op for op in item.ops))


SWA = trace_target(
    "swa",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "pools"),
    inputs=TraceInputs(generator.GENERATOR, lambda impls: generator.generator_for(
        any(checked_only(impl.preconditions) for impl in impls)), uniform.uniform_trace),
    judge=LockstepJudge(SWALockstep, describe_op, broken),
    catalogue=Catalogue("swa", IMPLEMENTATIONS, _shape, declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.size + item.size_swa),
                           extra=_every_decode_checked),
    coverage_modules=("kvfuzz.fuzz.swa.lockstep", "kvfuzz.oracle.swa.model"),
    live="kvfuzz.fuzz.swa.guard:guard")
