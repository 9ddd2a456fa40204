"""The paged allocator object (target "allocator"): the catalogue of allocator classes with
upstream `PagedTokenToKVPoolAllocator`'s constructor. Nothing heavy is imported here."""

from functools import partial

from kvfuzz.impl.registry import MUTANT, entry

UPSTREAM = "sglang.srt.mem_cache.allocator.paged:PagedTokenToKVPoolAllocator"
_entry = partial(entry, "allocator", __name__)


IMPLEMENTATIONS = (
    _entry("allocator.torch", "paged_allocator:PagedAllocator",
           "PagedAllocator: vectorized torch, upstream interface"),
    _entry("mutant.allocator.free_no_dedup", "mutants:FreeWithoutDedup",
           "free without per-call dedup", MUTANT),
    _entry("mutant.allocator.lost_at_merge", "mutants:LostAtMerge",
           "freed pages lost at merge", MUTANT),
    _entry("mutant.allocator.failed_alloc_advances", "mutants:FailedAllocAdvances",
           "a failed allocation advances the free list", MUTANT),
    _entry("mutant.allocator.padding_page", "mutants:PaddingPageHandedOut",
           "the padding page handed out", MUTANT),
)
