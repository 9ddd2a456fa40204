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


# What 0.33's cache policies have and those of vLLM 0.29 and earlier lack (0.30-0.32 not run):
# a hook told of each request's end. Behind it, a policy that ranks a request's chunks (LRU) or
# reorders them at the end (ARC), and a store threshold counted over whole offers; before it, a
# recency order alone and a threshold counted per lookup (0.25-0.28) or per key (0.29). kvfuzz's
# oracle models 0.33's: every trace of an earlier release diverges on one of those changes of
# policy (docs/release-history.md, K), not on a bug, so such a release is one line.
POLICY_HOOK = "on_request_finished"


def policy_hooks(impl, obj):
    """A released manager whose cache policy has no request hook cannot be judged: one line.
    The policy is the entry's second class (`Implementation.mutates`); a class of one's own
    given by import path is not refused."""
    if impl.kind != UPSTREAM or len(impl.mutates) < 2:
        return impl
    return policy_supported(impl, load_attribute(impl.mutates[1]))


def policy_supported(impl, policy):
    if callable(getattr(policy, POLICY_HOOK, None)):
        return impl
    release = installed_release(impl.requires) or "this release"
    raise ImplementationError(
        f"not supported: {impl.requires} {release}: {getattr(policy, '__name__', policy)} has "
        f"no {POLICY_HOOK} (the policies then ranked no request's chunks, reordered none at "
        f"its end and, before 0.30, counted the store threshold per lookup or key; kvfuzz "
        f"models 0.33's policies: no trace model of the earlier ones, "
        f"docs/release-history.md K)")


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
    judge=LockstepJudge(OffloadLockstep, describe_op, broken),
    catalogue=Catalogue("offload", IMPLEMENTATIONS, _shape, policy_hooks,
                        declarable=DECLARABLE),
    shrinker=TraceShrinker(lambda item: (len(item.ops), item.chunks, item.groups), CREATES,
                           smaller),
    coverage_modules=("kvfuzz.fuzz.offload.lockstep", "kvfuzz.oracle.offload.model"))
