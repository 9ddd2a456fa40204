"""Unified prefix caches (target "unified"): SGLang's `UnifiedRadixCache` (sglang 0.5.23) with its
full-attention component, once per tree core, run by default where SGLang is installed
(docs/upstream-sglang.md), driven with the released allocator in the loop, and mutants of its
released Python sources. Both entries name the one released class: `sglang.unified.rust` asks
SGLang for its Rust core (and runs the Python core beside it, to compare the two), and
`sglang.unified.python` for its Python core; the class's import path resolves to the first.
`sglang.unified.swa.rust` and `sglang.unified.swa.python` build it with the SWA component too
(profile `unified-swa/1`, not run by default), `sglang.unified.mamba.rust` and
`sglang.unified.mamba.python` with the Mamba component (profile `unified-mamba/1`, tree ops
only, not run by default), and `sglang.unified.mamba.donor.rust` and `.python` with it on
SGLang's unified memory pool (full KV and Mamba states in one buffer: the Full donor of
`evict_for_alloc`; the same traces, not run by default); `sglang.unified.host.rust` and
`.python` with HiCache's host tier (`unified-host/1`, not run by default). Nothing heavy is
imported here."""

from functools import partial

from kvfuzz.impl.registry import MUTANT, UPSTREAM, Implementation, entry
from kvfuzz.impl.unified.upstream_mutants import MUTATIONS
from kvfuzz.strategies.unified.profile import (CORES, HOST_TIER, KEEPS_KEY, KEEPS_MAMBA_VALUE,
                                              MAMBA_COMPONENT, MAMBA_DONOR,
                                              NO_RESET_IN_FLIGHT, SWA_COMPONENT)

RELEASED = "sglang.srt.mem_cache.unified_radix_cache:UnifiedRadixCache"
# A reset with requests in flight is in the contract (a lock from before it names a handle the new
# tree never mints again: its release raises KeyError and changes nothing); the Python core keeps
# a caller's key as RadixCache does, the Rust core copies it. Both keep the caller's Mamba value
# (a Mamba trace's insert; every in-tree caller hands over a fresh tensor), whatever the profile.
DECLARES = {"rust": (CORES["rust"], KEEPS_MAMBA_VALUE),
            "python": (KEEPS_KEY, CORES["python"], KEEPS_MAMBA_VALUE)}
SWA_DECLARES = {core: declared + (SWA_COMPONENT,) for core, declared in DECLARES.items()}
MAMBA_DECLARES = {core: declared + (MAMBA_COMPONENT,) for core, declared in DECLARES.items()}
DONOR_DECLARES = {core: declared + (MAMBA_DONOR,) for core, declared in MAMBA_DECLARES.items()}
HOST_DECLARES = {core: declared + (HOST_TIER,) for core, declared in DECLARES.items()}
# What an outside class may declare, by name (`__kvfuzz__`, or `--impl path@name+name`).
DECLARABLE = {"no_reset_in_flight": NO_RESET_IN_FLIGHT, "keeps_key": KEEPS_KEY,
              "rust_core": CORES["rust"], "python_core": CORES["python"],
              "swa_component": SWA_COMPONENT, "mamba_component": MAMBA_COMPONENT,
              "keeps_mamba_value": KEEPS_MAMBA_VALUE, "mamba_donor": MAMBA_DONOR,
              "host_tier": HOST_TIER}
_entry = partial(entry, "unified", __name__)

IMPLEMENTATIONS = (
    Implementation("sglang.unified.rust", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache, Rust tree core (checked against the Python core "
                   "too), token/paged allocator", UPSTREAM,
                   preconditions=DECLARES["rust"], default=True, requires="sglang"),
    Implementation("sglang.unified.python", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache, Python tree core (UnifiedTreeCore)", UPSTREAM,
                   preconditions=DECLARES["python"], default=True, requires="sglang"),
    # The SWA profile: not run by default (the twin makes a Rust trace some 4 s on one core);
    # `--impl sglang.unified.swa.rust` or `.python` runs it, on the unified-swa traces.
    Implementation("sglang.unified.swa.rust", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache with the SWA component, Rust tree core (checked "
                   "against the Python core too), hybrid SWA allocator", UPSTREAM,
                   preconditions=SWA_DECLARES["rust"], requires="sglang"),
    Implementation("sglang.unified.swa.python", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache with the SWA component, Python tree core, hybrid "
                   "SWA allocator", UPSTREAM, preconditions=SWA_DECLARES["python"],
                   requires="sglang"),
    # The Mamba profile: tree ops only (no request holds a state of its own), not run by
    # default; `--impl sglang.unified.mamba.rust` or `.python` runs it.
    Implementation("sglang.unified.mamba.rust", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache with the Mamba component, Rust tree core "
                   "(checked against the Python core too), tree ops", UPSTREAM,
                   preconditions=MAMBA_DECLARES["rust"], requires="sglang"),
    Implementation("sglang.unified.mamba.python", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache with the Mamba component, Python tree core, tree "
                   "ops", UPSTREAM, preconditions=MAMBA_DECLARES["python"], requires="sglang"),
    # The Mamba profile on the unified memory pool (`init_unified_mamba_pools`): the allocator
    # is a Full donor, so a state short of bytes evicts Full leaves; not run by default.
    Implementation("sglang.unified.mamba.donor.rust", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache with the Mamba component on the unified memory "
                   "pool (the Full donor), Rust tree core (checked against the Python core too), "
                   "tree ops", UPSTREAM, preconditions=DONOR_DECLARES["rust"], requires="sglang"),
    Implementation("sglang.unified.mamba.donor.python", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache with the Mamba component on the unified memory "
                   "pool (the Full donor), Python tree core, tree ops", UPSTREAM,
                   preconditions=DONOR_DECLARES["python"], requires="sglang"),
    # HiCache's host tier (write-back) over kvfuzz's synchronous host pool and copy engine
    # (impl/unified/host_tier.py): the judge reads the Python core's nodes, so the Rust entry
    # runs the Python core beside it and is held to it; not run by default.
    Implementation("sglang.unified.host.rust", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache with HiCache's host tier (write-back; kvfuzz's "
                   "stand-in host pool and copy engine), Rust tree core (checked against the "
                   "Python core too), tree ops", UPSTREAM, preconditions=HOST_DECLARES["rust"],
                   requires="sglang"),
    Implementation("sglang.unified.host.python", "unified", RELEASED,
                   "SGLang's UnifiedRadixCache with HiCache's host tier (write-back; kvfuzz's "
                   "stand-in host pool and copy engine), Python tree core, tree ops", UPSTREAM,
                   preconditions=HOST_DECLARES["python"], requires="sglang"),
) + tuple(
    _entry(f"mutant.sglang.unified.{name}", f"upstream_mutants:{name}", broken.why, MUTANT,
           requires="sglang",
           preconditions=(SWA_DECLARES if broken.swa else DONOR_DECLARES if broken.donor
                          else MAMBA_DECLARES if broken.mamba else
                          HOST_DECLARES if getattr(broken, "host", False) else
                          DECLARES)[broken.core])
    for name, broken in MUTATIONS.items()
)
