"""What a unified cache may declare (`Implementation.preconditions`): what a radix cache may
(`strategies.radix.profile`: no reset while requests are in flight, `insert` keeping the caller's
key), and which tree core it runs: the released class is one class with two cores
(`CacheInitParams.tree_core_backend`), so each catalogue entry says which it asks SGLang for.
A class that declares no core gets the one SGLang picks (its default, Rust, unless it falls
back). Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.radix.profile import KEEPS_KEY, NO_RESET_IN_FLIGHT, broken, unsupported

__all__ = ["CORES", "HOST_TIER", "KEEPS_KEY", "KEEPS_MAMBA_VALUE", "MAMBA_COMPONENT",
           "MAMBA_DONOR", "NO_RESET_IN_FLIGHT", "SWA_COMPONENT", "broken", "core_of", "donor_of",
           "host_of", "mamba_of", "swa_of", "unsupported"]

CORES = {
    "rust": "runs the Rust tree core (tree_core_backend='rust': the extension bundled in the "
            "wheel), checked against the oracle and against the Python core run beside it",
    "python": "runs the Python tree core (tree_core_backend='python': UnifiedTreeCore)",
}


# A profile of the cache, not a core: the entry builds it with the SWA component beside full
# attention, and gets the "unified-swa/1" traces (each with its window).
SWA_COMPONENT = ("builds the cache with the SWA component beside full attention "
                 "(tree_components FULL+SWA, the trace's sliding window) on SGLang's hybrid "
                 "SWATokenToKVPoolAllocator: it runs the unified-swa traces")


# The same for the Mamba component: the "unified-mamba/1" traces (tree ops only).
MAMBA_COMPONENT = ("builds the cache with the Mamba component beside full attention "
                   "(tree_components FULL+MAMBA, a HybridReqToTokenPool of the trace's Mamba "
                   "slots): it runs the unified-mamba traces")


# The Mamba component on SGLang's unified memory pool (`init_unified_mamba_pools`, what a hybrid
# Mamba model's scheduler builds with the unified pool): full KV pages and Mamba states share one
# byte buffer, so a state can be short of bytes while ids are free, and `evict_for_alloc` takes
# Full leaves as the donor (`UnifiedMambaTokenToKVPoolAllocator.mamba_full_cache_donor`).
MAMBA_DONOR = ("builds the Mamba component's pools as SGLang's unified memory pool does "
               "(init_unified_mamba_pools: full KV and Mamba states in one byte buffer, the "
               "allocator a Full donor for Mamba allocations): it runs the unified-mamba traces")


# Both cores keep the caller's Mamba value tensor as the node's state (the full value is copied):
# every in-tree caller hands over a fresh one (`MambaComponent.prepare_for_caching_req`: a clone
# of the request's slot, or a slot donated for the tree), so the entries declare it.
KEEPS_MAMBA_VALUE = ("keeps the caller's Mamba value tensor (InsertParams.mamba_value) as the "
                     "node's state: the harness does not rewrite it after the call")


# Full attention with HiCache's host tier (write-back, cache mode) over kvfuzz's synchronous
# stand-ins for the host pool and the copy engine (impl/unified/host_tier.py): the
# "unified-host/1" traces (tree ops, read by the host judge).
HOST_TIER = ("builds the cache with HiCache's host tier (write_back, host memory mode cache; "
             "kvfuzz's synchronous host pool and copy engine): it runs the unified-host traces")


def host_of(preconditions) -> bool:
    return HOST_TIER in preconditions


def mamba_of(preconditions) -> bool:
    return MAMBA_COMPONENT in preconditions


def donor_of(preconditions) -> bool:
    return MAMBA_DONOR in preconditions


def swa_of(preconditions) -> bool:
    return SWA_COMPONENT in preconditions


def core_of(preconditions) -> str | None:
    """The tree core the declarations ask for ("rust", "python"), or None: SGLang's choice."""
    return next((core for core, text in CORES.items() if text in preconditions), None)
