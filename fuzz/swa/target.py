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
from kvfuzz.impl.registry import ImplementationError, check_shape, installed_release
from kvfuzz.impl.swa import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.strategies.swa import codec, generator, uniform
from kvfuzz.strategies.swa.profile import NO_SEGMENT, SEGMENT_CALLS, broken, checked_only
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


def _declare(impl, obj):
    """A class without the segment releases (an earlier SGLang release's) gets none; one without
    a call every trace makes (`free_full`, before SGLang 0.5.19) cannot be driven."""
    missing = [name for name in REQUIRED if not callable(getattr(obj, name, None))]
    if missing:
        release = installed_release(impl.requires) or "this release"
        raise ImplementationError(f"not supported: {impl.requires} {release}: "
                                  f"{getattr(obj, '__name__', impl.path)} has no "
                                  f"{', '.join(missing)}, which every swa trace calls")
    if NO_SEGMENT in impl.preconditions or all(
            callable(getattr(obj, name, None)) for name in SEGMENT_CALLS):
        return impl
    return replace(impl, preconditions=impl.preconditions + (NO_SEGMENT,))


def _generator_for(impls):
    return generator.generator_for(any(checked_only(impl.preconditions) for impl in impls),
                                   not any(NO_SEGMENT in impl.preconditions for impl in impls))


# What every trace calls (a finish releases the full pool's slots with `free_full`).
REQUIRED = ("free_full", "free_swa", "alloc_extend_swa_tail")

SWA = trace_target(
    "swa",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "pools"),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(SWALockstep, describe_op, broken),
    catalogue=Catalogue("swa", IMPLEMENTATIONS, _shape, _declare, declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.size + item.size_swa),
                           extra=_every_decode_checked),
    coverage_modules=("kvfuzz.fuzz.swa.lockstep", "kvfuzz.oracle.swa.model"),
    live="kvfuzz.fuzz.swa.guard:guard")
