"""What an offloading manager may declare (`Implementation.preconditions`): the one cache policy
it runs (vLLM's manager takes either; a catalogue entry fixes one), and that its callers drain
the events before a reset, as vLLM's scheduler does. Its generator follows what it declares, and
a trace that breaks it is outside its contract (`broken`). A manager may also declare the older
contract of vLLM's releases before 0.31 (`LEGACY_POLICIES`, and how its store threshold counts):
those change what the oracle expects (oracle/offload/contract.py), not the traces. Standard
library only."""

from __future__ import annotations

from kvfuzz.strategies.offload.trace import POLICIES, Reset, Trace, events_pending_at_reset

LRU_ONLY = "cache_policy 'lru' only"
ARC_ONLY = "cache_policy 'arc' only"
ONLY = {"lru": LRU_ONLY, "arc": ARC_ONLY}
EVENTS_DRAINED = ("take_events() between a completed store and reset_cache() (vLLM's scheduler "
                  "drains the events every step; a reset comes between steps)")

# The contract of vLLM's CPU offloading manager before 0.31 (read from a release by
# impl/offload/release.py, modelled by oracle/offload/contract.py).
LEGACY_POLICIES = ("its cache policies have no request hooks (vLLM before 0.31): no request "
                   "ranks, no reorder at a request's end, no store-miss hook; the store "
                   "threshold filters the whole offer; a failed store publishes no event")
THRESHOLD_PER_KEY = ("its store threshold counts each key of an offer in turn, a full tracker "
                     "dropping its oldest key even one of that offer (vLLM 0.29)")
THRESHOLD_PER_LOOKUP = ("its store threshold counts each lookup of a key, not the offers "
                        "(vLLM 0.24-0.28)")
# vLLM 0.31 and 0.32: request hooks, but neither request positions nor a failed store's event
# (read by impl/offload/release.py; the oracle follows them, oracle/offload/contract.py).
RECENCY_RANKS = ("its policy takes no request access (no on_request_access, vLLM 0.31, 0.32): "
                 "the LRU ranks every chunk by recency alone, no request positions")
NO_FAILED_EVENT = ("a failed store publishes no event (vLLM before 0.33: no metadata-only "
                   "removal)")
# The manager of vLLM 0.20-0.23 (read from its classes by impl/offload/release.py): what its
# API lacks. The first two keep a trace out (`broken`); the others change what the oracle
# expects or leave a read out (oracle/offload/contract.py).
NO_RESET = ("no reset_cache (vLLM before 0.22; its connector had no cache reset): a trace with "
            "a reset is outside the contract")
NO_THRESHOLD = ("no store_threshold (vLLM before 0.22): a trace with a store threshold is "
                "outside the contract")
NO_REQUEST_CALLS = ("no on_new_request, on_request_finished (vLLM before 0.23): its connector "
                    "made a request's context and told the manager nothing at its start or end")
NO_STATS = "no get_stats (vLLM before 0.24): the usage stats are not compared"
PENDING_AS_MISS = ("lookup answers True or False, a key being stored False (vLLM 0.20): no "
                   "'retry later'")
LRU_BY_INSERTION = ("its manager tells the policy nothing when a chunk becomes evictable (no "
                    "mark_evictable, vLLM before 0.24): the LRU keeps every chunk in one list, "
                    "by store and touch, and evicts the first with no transfer in flight")


def policies(preconditions) -> tuple[str, ...]:
    """The policies whose traces an implementation with `preconditions` runs."""
    named = [policy for policy, text in ONLY.items() if text in preconditions]
    return tuple(named) if named else POLICIES


def drains_events(preconditions) -> bool:
    return EVENTS_DRAINED in preconditions


def resets(preconditions) -> bool:
    return NO_RESET not in preconditions


def thresholds(preconditions) -> bool:
    return NO_THRESHOLD not in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    found = [] if trace.policy in policies(preconditions) else [ONLY[p] for p in ONLY
                                                                if ONLY[p] in preconditions]
    if drains_events(preconditions) and events_pending_at_reset(trace):
        found.append(EVENTS_DRAINED)
    if not resets(preconditions) and any(isinstance(op, Reset) for op in trace.ops):
        found.append(NO_RESET)
    if not thresholds(preconditions) and trace.store_threshold >= 2:
        found.append(NO_THRESHOLD)
    return found
