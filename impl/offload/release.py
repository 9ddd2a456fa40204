"""What an offloading manager's release promises, read from its API (no vLLM import here: the
classes are handed in). vLLM before 0.31 has cache policies without request hooks, and its store
threshold counted otherwise (0.29: each key of an offer, `_record_access`; 0.24-0.28: each
lookup, inside `lookup`). The names are those of `DECLARABLE` (impl/offload/__init__.py); the
oracle's variant is oracle/offload/contract.py."""

from __future__ import annotations

import inspect

REQUEST_HOOK = "on_request_finished"


def contract_names(manager, policy) -> tuple[str, ...]:
    """() for the policies with request hooks (vLLM 0.31 on); else `legacy_policies` and how
    the store threshold counts where it is not per offer."""
    if callable(getattr(policy, REQUEST_HOOK, None)):
        return ()
    if callable(getattr(manager, "_record_accesses", None)):
        return ("legacy_policies",)  # 0.30: whole offers, as 0.33
    if callable(getattr(manager, "_record_access", None)):
        return ("legacy_policies", "threshold_per_key")
    return ("legacy_policies",) + (("threshold_per_lookup",) if counts_lookups(manager) else ())


def counts_lookups(manager) -> bool:
    """Whether `lookup` itself counts towards the store threshold (vLLM 0.24-0.28: it updates
    the tracker, `self.counts`)."""
    try:
        source = inspect.getsource(manager.lookup)
    except (OSError, TypeError):
        return False
    return "self.counts" in source
