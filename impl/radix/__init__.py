"""Prefix caches (target "radix"): the released SGLang `RadixCache` and `PureSWARadixCache`
(sglang 0.5.23), run by default where SGLang is installed (docs/upstream-sglang.md), driven with
the released allocator in the loop, and mutants of the released source. `sglang.radix.pure_swa`
runs the radix traces (no window: what it is with the floor 0 and no decode-time frees);
`sglang.radix.pure_swa.window` runs the window traces on the pure-SWA allocator (not by default:
`--impl` names it), as do the mutants of `pure_swa_radix_cache.py`. kvfuzz has no prefix
cache of its own: the target checks SGLang's and classes with its interface, by import path.
Nothing heavy is imported here."""

from functools import partial

from kvfuzz.impl.radix.pure_swa_mutants import MUTATIONS as PURE_SWA_MUTATIONS
from kvfuzz.impl.radix.upstream_mutants import MUTATIONS
from kvfuzz.impl.registry import MUTANT, UPSTREAM, Implementation, entry
from kvfuzz.strategies.radix.profile import (KEEPS_KEY, NO_PRIORITIES, NO_RESET_IN_FLIGHT,
                                             PREFILL_AWARE, WINDOW)

RELEASED = "sglang.srt.mem_cache.radix_cache:RadixCache"
RELEASED_PURE_SWA = "sglang.srt.mem_cache.pure_swa_radix_cache:PureSWARadixCache"
UPSTREAM_DECLARES = (NO_RESET_IN_FLIGHT, KEEPS_KEY)
WINDOW_DECLARES = UPSTREAM_DECLARES + (WINDOW, PREFILL_AWARE)
# What an outside class may declare, by name (`__kvfuzz__`, or `--impl path@name+name`).
DECLARABLE = {"no_reset_in_flight": NO_RESET_IN_FLIGHT, "keeps_key": KEEPS_KEY,
              "swa_window": WINDOW, "prefill_aware": PREFILL_AWARE,
              "no_priorities": NO_PRIORITIES}
_entry = partial(entry, "radix", __name__)

IMPLEMENTATIONS = (
    Implementation("sglang.radix", "radix", RELEASED,
                   "SGLang's RadixCache with its token/paged allocator (kvfuzz upstream fetch)",
                   UPSTREAM, preconditions=UPSTREAM_DECLARES, default=True, requires="sglang"),
    Implementation("sglang.radix.pure_swa", "radix", RELEASED_PURE_SWA,
                   "SGLang's PureSWARadixCache (all-SWA models), same allocator", UPSTREAM,
                   preconditions=UPSTREAM_DECLARES, default=True, requires="sglang"),
    # Not by default: `kvfuzz diff --upstream` keeps its time; `--impl` runs it.
    Implementation("sglang.radix.pure_swa.window", "radix", RELEASED_PURE_SWA,
                   "SGLang's PureSWARadixCache with its sliding window, prefill-aware, on "
                   "PureSWATokenToKVPoolAllocator", UPSTREAM, preconditions=WINDOW_DECLARES,
                   requires="sglang"),
    # Not by default, and not a contract: a history pass that sees past a release's dropped
    # priority (0.5.15-0.5.20, docs/release-history.md Q) on the same traces, priorities 0.
    Implementation("sglang.radix.pure_swa.unprioritized", "radix", RELEASED_PURE_SWA,
                   "SGLang's PureSWARadixCache on the radix traces without priorities (a "
                   "history pass behind finding Q)", UPSTREAM,
                   preconditions=UPSTREAM_DECLARES + (NO_PRIORITIES,), requires="sglang"),
) + tuple(
    _entry(f"mutant.sglang.radix.{name}", f"upstream_mutants:{name}", mutation.why, MUTANT,
           requires="sglang", preconditions=UPSTREAM_DECLARES)
    for name, mutation in MUTATIONS.items()
) + tuple(
    _entry(f"mutant.sglang.radix.pure_swa.{name}", f"pure_swa_mutants:{name}", mutation.why,
           MUTANT, requires="sglang", preconditions=WINDOW_DECLARES)
    for name, mutation in PURE_SWA_MUTATIONS.items()
)
