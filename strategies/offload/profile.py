"""What an offloading manager may declare (`Implementation.preconditions`): the one cache policy
it runs (vLLM's manager takes either; a catalogue entry fixes one), and that its callers drain
the events before a reset, as vLLM's scheduler does. Its generator follows what it declares, and
a trace that breaks it is outside its contract (`broken`). A manager may also declare the older
contract of vLLM's releases before 0.31 (`LEGACY_POLICIES`, and how its store threshold counts):
those change what the oracle expects (oracle/offload/contract.py), not the traces. Standard
library only."""

from __future__ import annotations

from kvfuzz.strategies.offload.trace import POLICIES, Trace, events_pending_at_reset

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


def policies(preconditions) -> tuple[str, ...]:
    """The policies whose traces an implementation with `preconditions` runs."""
    named = [policy for policy, text in ONLY.items() if text in preconditions]
    return tuple(named) if named else POLICIES


def drains_events(preconditions) -> bool:
    return EVENTS_DRAINED in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    found = [] if trace.policy in policies(preconditions) else [ONLY[p] for p in ONLY
                                                                if ONLY[p] in preconditions]
    if drains_events(preconditions) and events_pending_at_reset(trace):
        found.append(EVENTS_DRAINED)
    return found
