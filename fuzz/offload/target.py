"""The "offload" target: an offloading manager with vLLM `CPUOffloadingManager`'s interface
driven over connector-like traces with either cache policy, in lock step with the oracle
(`lockstep.py`).

    kvfuzz diff offload --cases 2000 --jobs 2
    kvfuzz diff offload --impl vllm.offload.arc
    kvfuzz diff offload --impl vllm.v1.kv_offload.cpu.manager:CPUOffloadingManager
Each implementation gets the traces it supports (the policy it runs, events drained before a
reset: strategies/offload/profile.py); a trace from elsewhere that breaks what it declares is
outside its contract. Imports vLLM only when a trace runs.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.trace_target import (LockstepJudge, TraceCodec, TraceInputs,
                                             TraceShrinker, trace_target)
from kvfuzz.fuzz.offload.lockstep import OffloadLockstep
from kvfuzz.impl.offload import DECLARABLE, IMPLEMENTATIONS
from kvfuzz.impl.registry import (UPSTREAM, ImplementationError, check_shape, installed_release,
                                  load_attribute)
from kvfuzz.oracle.offload.contract import contract_of
from kvfuzz.strategies.offload import codec, generator, uniform
from kvfuzz.strategies.offload.profile import broken
from kvfuzz.strategies.offload.trace import CREATES, FORMAT, describe_op, to_json

METHODS = ("on_new_request", "lookup", "prepare_load", "touch", "complete_load",
           "prepare_store", "complete_store", "on_request_finished", "take_events",
           "reset_cache", "get_stats")
KEYWORDS = ("num_chunks", "cache_policy", "enable_events", "store_threshold",
            "max_tracker_size")  # the driver's constructor call


def _shape(path, obj):
    check_shape(path, obj, 0, "a class with vLLM CPUOffloadingManager's interface", cls=True,
                methods=METHODS, keywords=KEYWORDS)


def release_contract(impl, obj):
    """A released manager whose cache policies have no request hooks (vLLM before 0.31) is
    judged by the contract of its release (oracle/offload/contract.py), read from its classes
    (impl/offload/release.py) into its preconditions. The policy is the entry's second class
    (`Implementation.mutates`); a class of one's own given by import path declares the older
    contract itself (`@legacy_policies`, DECLARABLE)."""
    if impl.kind != UPSTREAM or len(impl.mutates) < 2:
        return impl
    from kvfuzz.impl.offload.release import LACKING  # no vLLM import

    missing = [name for name in METHODS if not callable(getattr(obj, name, None))]

    def unsupported():
        release = installed_release(impl.requires) or "this release"
        return ImplementationError(
            f"not supported: {impl.requires} {release}: {getattr(obj, '__name__', obj)} has no "
            f"{', '.join(missing)}")
    if set(missing) - set(LACKING):  # a manager of another interface
        raise unsupported()
    judged = with_contract(impl, obj, load_attribute(impl.mutates[1]))
    # what vLLM 0.20-0.23 lack (stats, reset, the request calls) is declared there, each by a
    # name of its own; anything else missing is another interface
    if any(DECLARABLE[LACKING[name]] not in judged.preconditions for name in missing):
        raise unsupported()
    return judged


def with_contract(impl, manager, policy):
    from kvfuzz.impl.offload.release import contract_names  # no vLLM import

    names = contract_names(manager, policy)
    return replace(impl, preconditions=tuple(dict.fromkeys(
        impl.preconditions + tuple(DECLARABLE[name] for name in names))))


def _generator_for(impls):
    return generator.generator_for(frozenset().union(*(impl.preconditions for impl in impls)))


def smaller(item):
    """A smaller pool, then one group, then no store threshold."""
    if item.chunks > 1:
        yield replace(item, chunks=item.chunks - 1)
    if item.groups > 1:
        yield replace(item, groups=1)
    if item.store_threshold > 1:
        yield replace(item, store_threshold=1)


OFFLOAD = trace_target(
    "offload",
    codec=TraceCodec(FORMAT, codec.from_json, to_json, codec.worst_input, "manager",
                     max_ops=codec.MAX_OPS),
    inputs=TraceInputs(generator.GENERATOR, _generator_for, uniform.uniform_trace),
    judge=LockstepJudge(OffloadLockstep, describe_op, broken,
                        lambda impl: {"contract": contract_of(impl.preconditions)}),
    catalogue=Catalogue("offload", IMPLEMENTATIONS, _shape, release_contract,
                        declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.chunks, item.groups), CREATES,
                           smaller),
    coverage_modules=("kvfuzz.fuzz.offload.lockstep", "kvfuzz.oracle.offload.model"))
