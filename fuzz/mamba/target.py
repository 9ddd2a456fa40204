"""The "mamba" target: a Mamba state-slot allocator (upstream `MambaSlotAllocator`'s interface)
driven over scheduler-like traces, in lock step with the oracle (`lockstep.py`).

    kvfuzz diff mamba --cases 2000 --jobs 2
    kvfuzz diff mamba --impl sglang.srt.mem_cache.allocator.mamba:MambaSlotAllocator
    PYTHONPATH=<sglang 0.5.12> kvfuzz diff mamba --impl sglang.mamba   # its MambaPool
Each implementation gets the traces it supports (the group-protocol misuse it declares it never
sees, strategies/mamba/profile.py); a trace from elsewhere that has such misuse is outside its
contract. Imports torch only when a trace runs.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.fuzz.mamba.lockstep import MambaLockstep
from kvfuzz.impl.mamba import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.impl.mamba.state_pool import declare, passed, takes_state_shapes
from kvfuzz.impl.registry import check_shape
from kvfuzz.strategies.mamba import codec, generator, uniform
from kvfuzz.strategies.mamba.profile import broken, unsupported
from kvfuzz.strategies.mamba.trace import FORMAT, Admit, AllocMany, describe_op, to_json

# The group calls are not among them: a class without them is declared so (`declare`).
METHODS = ("alloc", "free", "clear", "available_size")
WHAT = ("a class with upstream MambaSlotAllocator's interface: (size, device), or an earlier "
        "SGLang's MambaPool: (*, size, cache_params, mamba_layer_ids, device)")


def _shape(path, obj):
    pool = isinstance(obj, type) and takes_state_shapes(obj)
    check_shape(path, obj, 0 if pool else 2, WHAT, cls=True, methods=METHODS,
                keywords=passed(obj) if pool else ())


def _generator_for(impls):
    return generator.generator_for(frozenset().union(*(unsupported(impl.preconditions)
                                                       for impl in impls)))


MAMBA = trace_target(
    "mamba",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "pool",
                     max_ops=codec.MAX_OPS),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(MambaLockstep, describe_op, broken),
    catalogue=Catalogue("mamba", IMPLEMENTATIONS, _shape, declare=declare,
                        declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.size), (Admit, AllocMany)),
    coverage_modules=("kvfuzz.fuzz.mamba.lockstep", "kvfuzz.oracle.mamba.model"),
    live="kvfuzz.fuzz.mamba.guard:guard")
