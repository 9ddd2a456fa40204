"""Offloading managers (target "offload"): the released vLLM `CPUOffloadingManager` (vllm 0.33.0)
with each of its cache policies, run by default where vLLM is installed (docs/upstream-vllm.md),
and mutants of its source. kvfuzz has no offloading manager of its own: the target exists to
check vLLM's and classes with its interface, by import path. Nothing heavy is imported here.

Both released entries name the same class: `vllm.offload.lru` runs the LRU traces and
`vllm.offload.arc` the ARC ones (the trace says the policy; the driver passes it to the
constructor). The class's import path resolves to the first, `vllm.offload.lru`; a class of
one's own given by import path runs both policies."""

from functools import partial

from kvfuzz.impl.offload.upstream_mutants import MUTATIONS
from kvfuzz.impl.registry import MUTANT, UPSTREAM, Implementation, entry
from kvfuzz.strategies.offload.profile import (EVENTS_DRAINED, LEGACY_POLICIES, LRU_BY_INSERTION,
                                               NO_FAILED_EVENT, NO_REQUEST_CALLS, NO_RESET,
                                               NO_STATS, RECENCY_RANKS,
                                               NO_THRESHOLD, ONLY, PENDING_AS_MISS,
                                               THRESHOLD_PER_KEY, THRESHOLD_PER_LOOKUP)

RELEASED = "vllm.v1.kv_offload.cpu.manager:CPUOffloadingManager"
DECLARABLE = {"events_drained_before_reset": EVENTS_DRAINED, "lru_only": ONLY["lru"],
              "arc_only": ONLY["arc"], "legacy_policies": LEGACY_POLICIES,
              "threshold_per_key": THRESHOLD_PER_KEY,
              "threshold_per_lookup": THRESHOLD_PER_LOOKUP,
              # vLLM 0.31, 0.32 (impl/offload/release.py, `ranked_names`)
              "recency_ranks": RECENCY_RANKS, "no_failed_store_event": NO_FAILED_EVENT,
              # vLLM 0.20-0.23 (impl/offload/release.py, `early_names`)
              "no_stats": NO_STATS, "no_reset": NO_RESET, "no_request_calls": NO_REQUEST_CALLS,
              "no_threshold": NO_THRESHOLD, "pending_as_miss": PENDING_AS_MISS,
              "lru_by_insertion": LRU_BY_INSERTION}
_entry = partial(entry, "offload", __name__)


POLICY_CLASSES = {"lru": "vllm.v1.kv_offload.cpu.policies.lru:LRUCachePolicy",
                  "arc": "vllm.v1.kv_offload.cpu.policies.arc:ARCCachePolicy"}


def declares(policy: str) -> tuple[str, ...]:
    """What the released manager declares when it runs `policy`'s traces."""
    return ONLY[policy], EVENTS_DRAINED


IMPLEMENTATIONS = tuple(
    Implementation(f"vllm.offload.{policy}", "offload", RELEASED,
                   f"vLLM's CPUOffloadingManager, {policy.upper()} policy (kvfuzz upstream "
                   f"fetch)", UPSTREAM, preconditions=declares(policy), default=True,
                   requires="vllm", mutates=(RELEASED, POLICY_CLASSES[policy]))
    for policy in ("lru", "arc")
) + tuple(
    _entry(f"mutant.vllm.offload.{name}", f"upstream_mutants:{name}", mutation.why, MUTANT,
           requires="vllm", preconditions=declares(policy))
    for name, (_, policy, mutation) in MUTATIONS.items()
)
