"""The "blockpool" target: a block pool with vLLM `BlockPool`'s interface driven over
manager-like traces, in lock step with the oracle (`lockstep.py`).

    kvfuzz diff blockpool --cases 2000 --jobs 2
    kvfuzz diff blockpool --impl vllm.v1.core.block_pool:BlockPool
Imports vLLM only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.blockpool.lockstep import BlockPoolLockstep
from kvfuzz.fuzz.trace_target import TraceTarget
from kvfuzz.impl.blockpool import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.blockpool import codec, generator
from kvfuzz.strategies.blockpool.trace import CREATES, FORMAT, Free, Share, Trace, Unpin, \
    describe_op, to_json

METHODS = ("get_new_blocks", "touch", "free_blocks", "cache_full_blocks", "get_cached_block",
           "evict_blocks", "reset_prefix_cache", "get_num_free_blocks", "unpin_blocks")
KEYWORDS = ("num_gpu_blocks", "enable_caching", "hash_block_size")  # the driver's constructor call


class BlockPoolTarget(TraceTarget):
    name = "blockpool"
    format = FORMAT
    judge = BlockPoolLockstep
    describe_op = staticmethod(describe_op)
    default_cases = 200
    shrink_budget = (3000, 20.0)
    worst_input = staticmethod(codec.worst_input)
    implementations = IMPLEMENTATIONS
    coverage_modules = ("kvfuzz.fuzz.blockpool.lockstep", "kvfuzz.oracle.blockpool.model")

    def validate(self, path, obj):
        check_shape(path, obj, 0, "a class with vLLM BlockPool's interface", cls=True,
                    methods=METHODS, keywords=KEYWORDS)

    def describe(self, item):
        return [("pool", item.describe())]

    def fewer_parts(self, item: Trace):
        """The trace with one holder taken out, the latest first."""
        rids = {op.rid for op in item.ops if isinstance(op, CREATES)}
        for rid in sorted(rids, reverse=True):
            yield replace(item, ops=tuple(op for op in (_without(op, rid) for op in item.ops)
                                          if op is not None))
        if item.blocks > 2:
            yield replace(item, blocks=item.blocks - 1)

    def size(self, item):
        return len(item.ops), item.blocks


def _without(op, rid: int):
    if getattr(op, "rid", None) == rid or (isinstance(op, Share) and op.src == rid):
        return None
    if isinstance(op, (Free, Unpin)) and rid in op.rids:
        rids = tuple(r for r in op.rids if r != rid)
        return replace(op, rids=rids) if rids else None
    return op


BLOCKPOOL = BlockPoolTarget(generator.GENERATOR, codec.from_json, to_json)
