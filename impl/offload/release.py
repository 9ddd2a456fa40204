"""What an offloading manager's release promises, read from its API (no vLLM import here: the
classes are handed in). vLLM before 0.31 has cache policies without request hooks, and its store
threshold counted otherwise (0.29: each key of an offer, `_record_access`; 0.24-0.28: each
lookup, inside `lookup`). vLLM 0.20-0.23 lack more of the API (`early_names`). The names are
those of `DECLARABLE` (impl/offload/__init__.py); the oracle's variant is
oracle/offload/contract.py."""

from __future__ import annotations

import inspect
import re

REQUEST_HOOK = "on_request_finished"
# The manager's methods a release may lack, and the name it then declares (each read by
# `early_names`); the target's other methods every release has.
LACKING = {"get_stats": "no_stats", "reset_cache": "no_reset",
           "on_new_request": "no_request_calls", "on_request_finished": "no_request_calls"}


def contract_names(manager, policy) -> tuple[str, ...]:
    """() for the policies with request hooks (vLLM 0.31 on); else `legacy_policies` and how
    the store threshold counts where it is not per offer."""
    if callable(getattr(policy, REQUEST_HOOK, None)):
        return ranked_names(manager, policy)
    if callable(getattr(manager, "_record_accesses", None)):
        return ("legacy_policies",)  # 0.30: whole offers, as 0.33
    if callable(getattr(manager, "_record_access", None)):
        return ("legacy_policies", "threshold_per_key")
    return ("legacy_policies",) + (("threshold_per_lookup",) if counts_lookups(manager) else
                                   ()) + early_names(manager, policy)


def ranked_names(manager, policy) -> tuple[str, ...]:
    """What the policies with request hooks lacked before 0.33 (vLLM 0.31, 0.32), each read from
    the classes: a request's accesses (`on_request_access`: the LRU's request positions), and a
    failed store's event (`complete_store` publishes no `metadata_only` removal)."""
    names = () if callable(getattr(policy, "on_request_access", None)) else ("recency_ranks",)
    try:
        source = inspect.getsource(manager.complete_store)
    except (OSError, TypeError):
        return names
    return names + (() if "metadata_only" in source else ("no_failed_store_event",))


def early_names(manager, policy) -> tuple[str, ...]:
    """What vLLM 0.20-0.23's classes lack, each read from them: the methods of `LACKING` (the
    request calls only where both are missing), a constructor without `store_threshold`
    (before 0.22), a lookup that answers bools alone (0.20), a policy told nothing when a chunk
    becomes evictable (no `mark_evictable`, before 0.24)."""
    names = [LACKING[name] for name in LACKING if not callable(getattr(manager, name, None))]
    if names.count("no_request_calls") == 1:
        names.remove("no_request_calls")  # one hook without the other: not a known release
    if "store_threshold" not in _parameters(manager):
        names.append("no_threshold")
    if answers_bools(manager):
        names.append("pending_as_miss")
    if not callable(getattr(policy, "mark_evictable", None)):
        names.append("lru_by_insertion")
    return tuple(dict.fromkeys(names))


def _parameters(cls) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return ()


def answers_bools(manager) -> bool:
    """Whether `lookup` answers True or False alone (vLLM 0.20: `return block is not None and
    block.is_ready`), never None ("retry later", 0.21 on) nor a `LookupResult` (0.25 on)."""
    try:
        source = inspect.getsource(manager.lookup)
    except (OSError, TypeError):
        return False
    return "is_ready" in source and not re.search(r"return None\b|LookupResult", source)


def counts_lookups(manager) -> bool:
    """Whether `lookup` itself counts towards the store threshold (vLLM 0.24-0.28: it updates
    the tracker, `self.counts`)."""
    try:
        source = inspect.getsource(manager.lookup)
    except (OSError, TypeError):
        return False
    return "self.counts" in source
