"""The "kvmanager" target: a KV-cache manager with vLLM `KVCacheManager`'s interface driven over
scheduler-like request lifecycles, in lock step with the oracle (`lockstep.py`).

    kvfuzz diff kvmanager --cases 2000 --jobs 2
    kvfuzz diff kvmanager --impl vllm.v1.core.kv_cache_manager:KVCacheManager
Imports vLLM only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.blockpool.target import joins_units
from kvfuzz.fuzz.blockpool.target import smaller_pool
from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.fuzz.kvmanager.hisparse import HiSparseLockstep
from kvfuzz.impl.kvmanager import IMPLEMENTATIONS
from kvfuzz.impl.registry import UPSTREAM, check_shape
from kvfuzz.strategies.kvmanager import codec, streams, uniform
from kvfuzz.strategies.kvmanager.describe import describe_op
from kvfuzz.strategies.kvmanager.released import LACKS, NO_UNIT_KEYS, broken, unread
from kvfuzz.strategies.kvmanager.trace import FORMAT, Arrive, to_json

METHODS = ("get_computed_blocks", "allocate_slots", "free", "get_block_ids",
           "reset_prefix_cache", "evict_blocks")
# The driver's constructor call: the KV-cache config, then these.
KEYWORDS = ("max_model_len", "scheduler_block_size", "hash_block_size", "enable_caching",
            "max_in_flight_tokens")


def _shape(path, obj):
    check_shape(path, obj, 1, "a class with vLLM KVCacheManager's interface", cls=True,
                methods=METHODS, keywords=KEYWORDS)


def _declare(impl, obj):
    """A released manager (an earlier vLLM's) declares the settings it does not take, and
    whether its pool keys a block of several hash units by their hashes joined."""
    if impl.kind != UPSTREAM:
        return impl
    from kvfuzz.impl.kvmanager.released_api import released_api  # imports vLLM

    lacking = [LACKS[name] for name, takes in released_api(obj).items() if not takes]
    lacking += [NO_UNIT_KEYS] if pool_joins_units() else []
    lacks = tuple(text for text in lacking if text not in impl.preconditions)
    return replace(impl, preconditions=impl.preconditions + lacks) if lacks else impl


def pool_joins_units() -> bool:
    """Whether the installed vLLM's block pool keys a block of several hash units by their
    hashes joined (before 0.24), as the blockpool target reads it."""
    from vllm.v1.core.block_pool import BlockPool

    return joins_units(BlockPool)


def _smaller(item):
    """A smaller pool, then shorter prompts and fewer extra keys."""
    yield from smaller_pool(item)
    for op in item.ops:
        if isinstance(op, Arrive):
            for smaller in _smaller_arrival(op):
                yield replace(item, ops=tuple(smaller if o is op else o for o in item.ops))


def _smaller_arrival(op: Arrive):
    """The prompt a token shorter (its images that no longer fit left out: a placeholder
    lies within its prompt), then without its LoRA adapter, its salt, or one of its images."""
    if len(op.tokens) > 1:
        end = len(op.tokens) - 1
        yield replace(op, tokens=op.tokens[:end],
                      images=tuple(image for image in op.images if image[1] + image[2] <= end))
    if op.lora:
        yield replace(op, lora="", lora_path="")
    if op.salt:
        yield replace(op, salt="")
    for index in range(len(op.images)):
        yield replace(op, images=op.images[:index] + op.images[index + 1:])


def _size(item):
    arrivals = [op for op in item.ops if isinstance(op, Arrive)]
    return len(item.ops), item.blocks, sum(len(op.tokens) for op in arrivals), \
        sum(bool(op.lora) + bool(op.salt) + len(op.images) for op in arrivals)


KVMANAGER = trace_target(
    "kvmanager",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "manager",
                     codec.MAX_OPS),
    inputs=TraceInputs(streams.GENERATOR, uniform=uniform.uniform_trace),
    judge=LockstepJudge(HiSparseLockstep, describe_op, broken,
                        lambda impl: {"unread": unread(impl.preconditions)}),
    catalogue=Catalogue("kvmanager", IMPLEMENTATIONS, _shape, _declare),
    shrinker=TraceShrinker(_size, (Arrive,), _smaller, budget=(3000, 30.0)),
    live="kvfuzz.fuzz.kvmanager.guard:guard",
    coverage_modules=("kvfuzz.fuzz.kvmanager.lockstep", "kvfuzz.oracle.kvmanager.model"))
