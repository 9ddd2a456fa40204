"""The "blockpool" target: a block pool with vLLM `BlockPool`'s interface driven over
manager-like traces, in lock step with the oracle (`lockstep.py`).

    kvfuzz diff blockpool --cases 2000 --jobs 2
    kvfuzz diff blockpool --impl vllm.v1.core.block_pool:BlockPool
Each implementation gets the traces it supports (a pool whose callers never double-free says
so, strategies/blockpool/profile.py); a trace from elsewhere with a double free is outside its
contract. Imports vLLM only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.blockpool.lockstep import BlockPoolLockstep
from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.impl.blockpool import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.blockpool import codec, generator, uniform
from kvfuzz.strategies.blockpool.profile import DECLARABLE, NO_UNPIN, broken
from kvfuzz.strategies.blockpool.trace import CREATES, FORMAT, describe_op, to_json

METHODS = ("get_new_blocks", "touch", "free_blocks", "cache_full_blocks", "get_cached_block",
           "evict_blocks", "reset_prefix_cache", "get_num_free_blocks", "unpin_blocks")
KEYWORDS = ("num_gpu_blocks", "enable_caching", "hash_block_size")  # the driver's constructor call


def _shape(path, obj):
    check_shape(path, obj, 0, "a class with vLLM BlockPool's interface", cls=True,
                methods=METHODS, keywords=KEYWORDS)


def _declare(impl, obj):
    """A pool class without `unpin_blocks` (an earlier vLLM release's) gets no unpins."""
    if callable(getattr(obj, "unpin_blocks", None)) or NO_UNPIN in impl.preconditions:
        return impl
    return replace(impl, preconditions=impl.preconditions + (NO_UNPIN,))


def _generator_for(impls):
    return generator.generator_for(frozenset().union(*(impl.preconditions for impl in impls)))


def smaller_pool(item):
    if item.blocks > 2:
        yield replace(item, blocks=item.blocks - 1)


BLOCKPOOL = trace_target(
    "blockpool",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "pool",
                     max_ops=codec.MAX_OPS),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(BlockPoolLockstep, describe_op, broken),
    catalogue=Catalogue("blockpool", IMPLEMENTATIONS, _shape, _declare, declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.blocks), CREATES, smaller_pool),
    coverage_modules=("kvfuzz.fuzz.blockpool.lockstep", "kvfuzz.oracle.blockpool.model"),
    live="kvfuzz.fuzz.blockpool.guard:guard")
