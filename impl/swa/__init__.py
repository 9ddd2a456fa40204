"""Hybrid full + sliding-window allocators (target "swa"): the catalogue of classes with upstream
`SWATokenToKVPoolAllocator`'s constructor `(size, size_swa, page_size, dtype, device, kvcache,
need_sort)`, the released upstream class with what it declares (strategies/swa/profile.py), and
mutants. Nothing heavy is imported here."""

from functools import partial

from kvfuzz.impl.registry import MUTANT, UPSTREAM, Implementation, entry
from kvfuzz.impl.swa.upstream_mutants import MUTATIONS
from kvfuzz.strategies.swa.profile import CHECKED_DECODE, LACKING, POW2_PAGES

RELEASED = "sglang.srt.mem_cache.allocator.swa:SWATokenToKVPoolAllocator"
UPSTREAM_DECLARES = (CHECKED_DECODE,)
# What an outside class may declare, by name (`__kvfuzz__`, or `--impl path@name+name`).
DECLARABLE = {"checked_decode": CHECKED_DECODE, "power_of_two_page_size": POW2_PAGES}
_entry = partial(entry, "swa", __name__)

IMPLEMENTATIONS = (
    _entry("swa.torch", "swa_allocator:SWAAllocator",
           "SWAAllocator: two torch pools and the mapping, upstream interface"),
    _entry("mutant.swa.decode_unchecked", "mutants:DecodeUnchecked",
           "a decode one pool cannot serve leaks the other pool's page", MUTANT),
    _entry("mutant.swa.evict_keeps_mapping", "mutants:EvictKeepsMapping",
           "window eviction releases SWA slots but keeps them mapped", MUTANT),
    _entry("mutant.swa.continues_from_full_slot", "mutants:SWAContinuesFromFullSlot",
           "the SWA side of an extend continues from the full last_loc", MUTANT),
    _entry("mutant.swa.segment_unmaps_first_slot", "mutants:SegmentUnmapsFirstSlotOnly",
           "free_swa_segment unmaps each page's first slot only", MUTANT),
    _entry("mutant.swa.group_releases_at_once", "mutants:GroupReleasesSWAAtOnce",
           "window evictions inside a free group release at once", MUTANT),
    _entry("mutant.swa.clear_keeps_mapping", "mutants:ClearKeepsMapping",
           "clear() keeps the mapping", MUTANT),
    _entry("mutant.swa.tail_mapped_from_the_start", "mutants:TailMappedFromTheStart",
           "a tail allocation maps the extend's first tokens to the SWA slots", MUTANT),
    Implementation("sglang.swa", "swa", RELEASED,
                   "upstream SWATokenToKVPoolAllocator (needs sglang)", UPSTREAM,
                   preconditions=UPSTREAM_DECLARES, requires="sglang",
                   # before 0.5.13, beside SGLang's SWA memory pool
                   earlier=("sglang.srt.mem_cache.swa_memory_pool:SWATokenToKVPoolAllocator",)),
    # Not by default, and not a contract: a history pass that sees past findings F and C (free
    # groups, SGLang up to 0.5.19) on the same builds without free groups.
    Implementation("sglang.swa.ungrouped", "swa", RELEASED,
                   "upstream SWATokenToKVPoolAllocator on the swa traces without free groups (a "
                   "history pass behind findings F and C)", UPSTREAM,
                   preconditions=UPSTREAM_DECLARES + (LACKING["group"][0],), requires="sglang",
                   earlier=("sglang.srt.mem_cache.swa_memory_pool:SWATokenToKVPoolAllocator",)),
) + tuple(
    _entry(f"mutant.sglang.swa.{name}", f"upstream_mutants:{name}", mutation.why, MUTANT,
           requires="sglang", preconditions=UPSTREAM_DECLARES)
    for name, mutation in MUTATIONS.items()
)
