"""Mamba state-slot allocators (target "mamba"): the catalogue of classes with upstream
`MambaSlotAllocator`'s constructor `(size, device)`, the released upstream class with what it
declares (strategies/mamba/profile.py; before 0.5.13 the slots were SGLang's `MambaPool`, read as
installed: `state_pool.py`), and mutants. Nothing heavy is imported here."""

from functools import partial

from kvfuzz.impl.mamba.upstream_mutants import MUTATIONS
from kvfuzz.impl.registry import MUTANT, UPSTREAM, Implementation, entry
from kvfuzz.strategies.mamba.profile import NO_CLEAR_IN_GROUP, NO_NESTED, NO_STRAY_END

RELEASED = "sglang.srt.mem_cache.allocator.mamba:MambaSlotAllocator"
# Before 0.5.13 (no allocator package): the free list inside the state pool (`state_pool.py`).
EARLIER = ("sglang.srt.mem_cache.memory_pool:MambaPool",)
UPSTREAM_DECLARES = (NO_NESTED, NO_CLEAR_IN_GROUP)
# What an outside class may declare, by name (`__kvfuzz__`, or `--impl path@name+name`).
DECLARABLE = {"no_nested_groups": NO_NESTED, "no_clear_in_group": NO_CLEAR_IN_GROUP,
              "no_stray_group_end": NO_STRAY_END}
_entry = partial(entry, "mamba", __name__)

IMPLEMENTATIONS = (
    _entry("mamba.torch", "slot_allocator:MambaSlots",
           "MambaSlots: torch free list, upstream interface"),
    _entry("mutant.mamba.group_end_leaks", "mutants:GroupEndLeaks",
           "a group's unused slots never go back", MUTANT),
    _entry("mutant.mamba.exact_fit_refused", "mutants:ExactFitRefused",
           "an allocation of exactly the free slots is refused", MUTANT),
    _entry("mutant.mamba.free_keeps_view", "mutants:FreeKeepsCallerTensor",
           "free into an empty free list keeps the caller's tensor", MUTANT),
    Implementation("sglang.mamba", "mamba", RELEASED,
                   "upstream MambaSlotAllocator (needs sglang installed)", UPSTREAM,
                   preconditions=UPSTREAM_DECLARES, requires="sglang", earlier=EARLIER),
) + tuple(
    _entry(f"mutant.sglang.mamba.{name}", f"upstream_mutants:{name}", mutation.why, MUTANT,
           requires="sglang", preconditions=UPSTREAM_DECLARES)
    for name, mutation in MUTATIONS.items()
)
