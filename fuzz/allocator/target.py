"""The "allocator" target: the allocator object (upstream `PagedTokenToKVPoolAllocator`'s
interface, or `TokenToKVPoolAllocator`'s) driven over request-lifecycle traces, in lock step with
the oracle (`lockstep.py`).

    kvfuzz diff allocator --cases 2000 --jobs 2
    kvfuzz diff allocator --impl sglang.srt.mem_cache.allocator.paged:PagedTokenToKVPoolAllocator
Each implementation gets the traces it supports (its declared preconditions,
strategies/allocator/profile.py); a trace from elsewhere that breaks one is outside its
contract. An outside class without `page_size` in its constructor is taken to have the token
interface. Imports torch only when a trace runs.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

from kvfuzz.fuzz.allocator.lockstep import AllocatorLockstep
from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.impl.allocator import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.allocator import codec, generator, uniform
from kvfuzz.strategies.allocator.profile import (CHECKS_AFTER_RELEASE, KEEPS_PAGE_IDS,
                                                 NO_PAGE_IDS, NO_SEGMENT, TOKEN_INTERFACE,
                                                 broken, profile_for)
from kvfuzz.strategies.allocator.trace import FORMAT, describe_op, to_json

# What the driver calls (kvfuzz/impl/allocator/driver.py), by interface.
TOKEN_METHODS = ("alloc", "free", "free_segment", "free_page_ids", "free_group_begin",
                 "free_group_end", "clear", "available_size")
METHODS = TOKEN_METHODS + ("alloc_extend", "alloc_decode")


def _shape(path, obj):
    if _token_shaped(obj):
        check_shape(path, obj, 5, "a class with upstream TokenToKVPoolAllocator's interface: "
                    "(size, dtype, device, kvcache, need_sort)", cls=True, methods=TOKEN_METHODS)
    else:
        check_shape(path, obj, 6, "a class with upstream PagedTokenToKVPoolAllocator's "
                    "interface: (size, page_size, dtype, device, kvcache, need_sort)",
                    cls=True, methods=METHODS)


def _declare(impl, obj):
    """A class of the token shape declares the token interface (unless its entry says more);
    a release call it does not have (an earlier SGLang release's class) is not made."""
    lacks = tuple(missing for method, missing in (("free_page_ids", NO_PAGE_IDS),
                                                  ("free_segment", NO_SEGMENT))
                  if not callable(getattr(obj, method, None))
                  and missing not in impl.preconditions)
    if not impl.preconditions and _token_shaped(obj):
        impl = replace(impl, preconditions=(TOKEN_INTERFACE,))
    return replace(impl, preconditions=impl.preconditions + lacks) if lacks else impl


def _token_shaped(obj) -> bool:
    """A class whose constructor takes no `page_size`: upstream TokenToKVPoolAllocator's shape."""
    try:
        return isinstance(obj, type) and "page_size" not in inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False


def _generator_for(impls):
    return generator.generator_for(tuple(sorted({p for impl in impls
                                                 for p in impl.preconditions})))


ALLOCATOR = trace_target(
    "allocator",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "pool",
                     max_ops=codec.MAX_OPS),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(AllocatorLockstep, describe_op, broken, lambda impl: {
        "reuse_page_ids": KEEPS_PAGE_IDS not in impl.preconditions,
        "checks_after_release": CHECKS_AFTER_RELEASE in impl.preconditions,
        "hows": profile_for(impl.preconditions).hows}),
    catalogue=Catalogue("allocator", IMPLEMENTATIONS, _shape, _declare,
                        declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), sum(len(getattr(op, "rids", ()))
                                                            for op in item.ops))),
    coverage_modules=("kvfuzz.fuzz.allocator.lockstep", "kvfuzz.oracle.allocator.model",
                      "kvfuzz.oracle.allocator.invariants"),
    live="kvfuzz.fuzz.allocator.guard:guard")
