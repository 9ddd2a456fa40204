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
from dataclasses import fields, replace

from kvfuzz.fuzz.allocator.lockstep import AllocatorLockstep
from kvfuzz.fuzz.trace_target import TraceTarget
from kvfuzz.impl.allocator import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.allocator import codec, generator
from kvfuzz.strategies.allocator.profile import KEEPS_PAGE_IDS, TOKEN_INTERFACE, broken
from kvfuzz.strategies.allocator.trace import FORMAT, Extend, Trace, describe_op, to_json


# What the driver calls (kvfuzz/impl/allocator/driver.py), by interface.
TOKEN_METHODS = ("alloc", "free", "free_segment", "free_page_ids", "free_group_begin",
                 "free_group_end", "clear", "available_size")
METHODS = TOKEN_METHODS + ("alloc_extend", "alloc_decode")


class AllocatorTarget(TraceTarget):
    name = "allocator"
    format = FORMAT
    judge = AllocatorLockstep
    broken_preconditions = staticmethod(broken)
    describe_op = staticmethod(describe_op)
    default_cases = 200
    shrink_budget = (3000, 20.0)
    worst_input = staticmethod(codec.worst_input)
    implementations = IMPLEMENTATIONS
    coverage_modules = ("kvfuzz.fuzz.allocator.lockstep", "kvfuzz.oracle.allocator.model",
                        "kvfuzz.oracle.allocator.invariants")

    def validate(self, path, obj):
        if _token_shaped(obj):
            check_shape(path, obj, 5, "a class with upstream TokenToKVPoolAllocator's interface: "
                        "(size, dtype, device, kvcache, need_sort)", cls=True,
                        methods=TOKEN_METHODS)
        else:
            check_shape(path, obj, 6, "a class with upstream PagedTokenToKVPoolAllocator's "
                        "interface: (size, page_size, dtype, device, kvcache, need_sort)",
                        cls=True, methods=METHODS)

    def declared(self, impl, obj):
        impl = super().declared(impl, obj)
        if impl.preconditions or not _token_shaped(obj):
            return impl
        return replace(impl, preconditions=(TOKEN_INTERFACE,))

    def generator_for(self, impls):
        preconditions = {p for impl in impls for p in impl.preconditions}
        return generator.generator_for(tuple(sorted(preconditions)))

    def describe(self, item):
        return [("pool", item.describe())]

    def lockstep(self, item: Trace, impl, device: str):
        return self.judge(item, impl.load(), device,
                          reuse_page_ids=KEEPS_PAGE_IDS not in impl.preconditions)

    def fewer_parts(self, item: Trace):
        """The trace with one request taken out, the latest first."""
        for rid in sorted(_rids(item), reverse=True):
            yield replace(item, ops=tuple(op for op in (_without(op, rid) for op in item.ops)
                                          if op is not None))

    def size(self, item):
        return len(item.ops), sum(len(getattr(op, "rids", ())) for op in item.ops)


def _token_shaped(obj) -> bool:
    """A class whose constructor takes no `page_size`: upstream TokenToKVPoolAllocator's shape."""
    try:
        return isinstance(obj, type) and "page_size" not in inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return False


def _rids(trace: Trace) -> set[int]:
    found = set()
    for op in trace.ops:
        found.update(getattr(op, "rids", ()))
        if hasattr(op, "rid"):
            found.add(op.rid)
    return found


def _without(op, rid: int):
    """`op` with request `rid` taken out: None when the op is about `rid` alone."""
    if getattr(op, "rid", None) == rid:
        return None
    if isinstance(op, Extend) and rid in op.rids:
        keep = [(r, n) for r, n in zip(op.rids, op.lens) if r != rid]
        if not keep:
            return None
        return replace(op, rids=tuple(r for r, _ in keep), lens=tuple(n for _, n in keep))
    if "rids" in {f.name for f in fields(op)} and rid in op.rids:
        rids = tuple(r for r in op.rids if r != rid)
        return replace(op, rids=rids) if rids else None
    if getattr(op, "share_from", None) == rid:
        return replace(op, share_from=None, share_pages=0)
    return op


ALLOCATOR = AllocatorTarget(generator.GENERATOR, codec.from_json, to_json)
