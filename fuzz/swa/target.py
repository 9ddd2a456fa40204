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

import sys
from dataclasses import replace

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.fuzz.swa.lockstep import SWALockstep
from kvfuzz.impl.registry import ImplementationError, check_shape, installed_release
from kvfuzz.impl.swa import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.oracle.swa.contract import BY_NAME, contract_of
from kvfuzz.strategies.swa import codec, generator, uniform
from kvfuzz.strategies.swa.profile import (LACKING, NO_SEGMENT, POW2_PAGES, SEGMENT_CALLS,
                                           broken, checked_only, lacking, pow2_only)
from kvfuzz.strategies.swa.trace import FORMAT, Decode, describe_op, to_json

# What every SGLang release's class has (0.5.10 on); what a class lacks beyond these it declares
# (`_declare`): no segment releases, no tail allocation, no free_full (the calls of its day).
METHODS = ("alloc", "alloc_extend", "alloc_decode", "free", "free_swa", "free_group_begin",
           "free_group_end", "clear", "available_size", "full_available_size",
           "swa_available_size")


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
    """A class without the segment releases (an earlier SGLang release's) gets none, and one
    without the reclaim, resize, offload or tail calls none of those; one without `free_full`
    (before SGLang 0.5.19) is driven through the calls of its day, the oracle told what they
    promise (impl/swa/legacy.py reads it, oracle/swa/contract.py models it); one without a call
    every trace makes cannot be driven."""
    from kvfuzz.impl.swa.legacy import contract_names  # no torch, no SGLang

    missing = [name for name in REQUIRED if not callable(getattr(obj, name, None))]
    if missing:
        release = installed_release(impl.requires) or "this release"
        raise ImplementationError(f"not supported: {impl.requires} {release}: "
                                  f"{getattr(obj, '__name__', impl.path)} has no "
                                  f"{', '.join(missing)}, which every swa trace calls")

    def has(calls) -> bool:
        return all(callable(getattr(obj, name, None)) for name in calls)

    declared = [NO_SEGMENT] if not has(SEGMENT_CALLS) else []
    declared += [text for name, (text, calls, _) in LACKING.items()
                 if name != "group" and not has(calls)]  # (groups: a history pass's, by entry)
    declared += [POW2_PAGES] if kernels_only(obj) else []
    declared += [BY_NAME[name] for name in contract_names(obj)]
    added = tuple(text for text in declared if text not in impl.preconditions)
    return replace(impl, preconditions=impl.preconditions + added) if added else impl


def kernels_only(obj) -> bool:
    """Whether the paged allocator the class builds its pools from (the `PagedTokenToKVPool
    Allocator` of the class's module) launches a Triton kernel in `alloc_extend` or
    `alloc_decode` with no torch path beside it: read from the names those methods' code uses
    (SGLang before 0.5.22 names only `alloc_extend_kernel`; 0.5.22 `alloc_extend_naive` too,
    taken where the platform has no Triton). Such a class takes only power-of-two page sizes."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    paged = getattr(module, "PagedTokenToKVPoolAllocator", None)
    for method in ("alloc_extend", "alloc_decode"):
        names = getattr(getattr(getattr(paged, method, None), "__code__", None), "co_names", ())
        if any(n.endswith("_kernel") for n in names) and \
                not any(n.endswith("_naive") for n in names):
            return True
    return False


def _generator_for(impls):
    lacks = tuple(name for name in LACKING
                  if any(name in lacking(impl.preconditions) for impl in impls))
    return generator.generator_for(any(checked_only(impl.preconditions) for impl in impls),
                                   not any(NO_SEGMENT in impl.preconditions for impl in impls),
                                   lacks, any(pow2_only(impl.preconditions) for impl in impls))


# What every trace calls: a finish releases with `free` (and `free_full` where the class has it),
# a window with `free_swa`.
REQUIRED = ("free", "free_swa")


def absent_calls(preconditions) -> frozenset[str]:
    """The release calls a class declared it lacks: a caller bug made through one of them
    (`fuzz/swa/misuse.py`) is not made (else the missing method's AttributeError would pass
    for the rejection the oracle expects)."""
    absent = set(SEGMENT_CALLS) if NO_SEGMENT in preconditions else set()
    for name in lacking(preconditions):
        absent.update(LACKING[name][1])
    if contract_of(preconditions).row_free:
        absent.add("free_full")
    return frozenset(absent)

SWA = trace_target(
    "swa",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "pools"),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(SWALockstep, describe_op, broken,
                        lambda impl: {"contract": contract_of(impl.preconditions),
                                      "absent": absent_calls(impl.preconditions)}),
    catalogue=Catalogue("swa", IMPLEMENTATIONS, _shape, _declare, declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.size + item.size_swa),
                           extra=_every_decode_checked),
    coverage_modules=("kvfuzz.fuzz.swa.lockstep", "kvfuzz.oracle.swa.model"),
    live="kvfuzz.fuzz.swa.guard:guard")
