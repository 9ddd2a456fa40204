"""The "kvmanager" target: a KV-cache manager with vLLM `KVCacheManager`'s interface driven over
scheduler-like request lifecycles, in lock step with the oracle (`lockstep.py`).

    kvfuzz diff kvmanager --cases 2000 --jobs 2
    kvfuzz diff kvmanager --impl vllm.v1.core.kv_cache_manager:KVCacheManager
Imports vLLM only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.kvmanager.lockstep import KVManagerLockstep
from kvfuzz.fuzz.trace_target import TraceTarget
from kvfuzz.impl.kvmanager import IMPLEMENTATIONS
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.kvmanager import codec, generator
from kvfuzz.strategies.kvmanager.trace import FORMAT, Arrive, Trace, describe_op, to_json

METHODS = ("get_computed_blocks", "allocate_slots", "free", "get_block_ids",
           "reset_prefix_cache", "evict_blocks")
# The driver's constructor call: the KV-cache config, then these.
KEYWORDS = ("max_model_len", "scheduler_block_size", "hash_block_size", "enable_caching",
            "max_in_flight_tokens")


class KVManagerTarget(TraceTarget):
    name = "kvmanager"
    format = FORMAT
    judge = KVManagerLockstep
    describe_op = staticmethod(describe_op)
    default_cases = 200
    shrink_budget = (3000, 30.0)
    worst_input = staticmethod(codec.worst_input)
    implementations = IMPLEMENTATIONS
    coverage_modules = ("kvfuzz.fuzz.kvmanager.lockstep", "kvfuzz.oracle.kvmanager.model")

    def validate(self, path, obj):
        check_shape(path, obj, 1, "a class with vLLM KVCacheManager's interface", cls=True,
                    methods=METHODS, keywords=KEYWORDS)

    def describe(self, item):
        return [("manager", item.describe())]

    def fewer_parts(self, item: Trace):
        """The trace with one request taken out, the latest first; then a smaller pool."""
        rids = {op.rid for op in item.ops if isinstance(op, Arrive)}
        for rid in sorted(rids, reverse=True):
            yield replace(item, ops=tuple(op for op in item.ops
                                          if getattr(op, "rid", None) != rid))
        if item.blocks > 2:
            yield replace(item, blocks=item.blocks - 1)
        for op in item.ops:  # shorter prompts
            if isinstance(op, Arrive) and len(op.tokens) > 1:
                shorter = replace(op, tokens=op.tokens[:-1])
                yield replace(item, ops=tuple(shorter if o is op else o for o in item.ops))

    def size(self, item):
        return len(item.ops), item.blocks, sum(len(op.tokens) for op in item.ops
                                               if isinstance(op, Arrive))


KVMANAGER = KVManagerTarget(generator.GENERATOR, codec.from_json, to_json)
