"""The allocator object (target "allocator"): the catalogue of allocator classes with upstream
`PagedTokenToKVPoolAllocator`'s constructor, and the released upstream classes with what each
declares (strategies/allocator/profile.py). Nothing heavy is imported here."""

from functools import partial

from kvfuzz.impl.allocator.upstream_mutants import MUTATIONS
from kvfuzz.impl.registry import MUTANT, UPSTREAM, Implementation, entry
from kvfuzz.strategies.allocator.profile import (CHECKS_AFTER_RELEASE, KEEPS_PAGE_IDS,
                                                 NO_RELEASE_CHECKS, PAGE_SIZE_2_UP,
                                                 TOKEN_INTERFACE)

RELEASED = "sglang.srt.mem_cache.allocator.paged:PagedTokenToKVPoolAllocator"
RELEASED_TOKEN = "sglang.srt.mem_cache.allocator.token:TokenToKVPoolAllocator"
ONE_MODULE = "sglang.srt.mem_cache.allocator"  # where SGLang kept its allocators before 0.5.13
_entry = partial(entry, "allocator", __name__)
PAGED = (PAGE_SIZE_2_UP, NO_RELEASE_CHECKS, CHECKS_AFTER_RELEASE, KEEPS_PAGE_IDS)
# What an outside class may declare, by name (`__kvfuzz__`, or `--impl path@name+name`).
DECLARABLE = {"page_size_2_up": PAGE_SIZE_2_UP, "token_interface": TOKEN_INTERFACE,
              "no_release_checks": NO_RELEASE_CHECKS, "keeps_page_ids": KEEPS_PAGE_IDS,
              "checks_after_release": CHECKS_AFTER_RELEASE}
TOKEN = (TOKEN_INTERFACE,)


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
    _entry("mutant.allocator.group_keeps_view", "mutants:GroupKeepsCallerTensor",
           "a free group keeps the caller's tensor", MUTANT),
    _entry("mutant.allocator.nested_group_restarts", "mutants:NestedGroupRestarts",
           "a nested free_group_begin restarts the group", MUTANT),
    # The released classes (sglang 0.5.23, needs sglang installed): `--impl` by name or by
    # their import path gets these preconditions.
    Implementation("sglang.paged", "allocator", RELEASED,
                   "upstream PagedTokenToKVPoolAllocator (needs sglang installed)", UPSTREAM,
                   preconditions=PAGED, requires="sglang",
                   earlier=(f"{ONE_MODULE}:PagedTokenToKVPoolAllocator",)),
    Implementation("sglang.token", "allocator", RELEASED_TOKEN,
                   "upstream TokenToKVPoolAllocator, page size 1 (needs sglang installed)",
                   UPSTREAM, preconditions=TOKEN, requires="sglang",
                   earlier=(f"{ONE_MODULE}:TokenToKVPoolAllocator",)),
) + tuple(
    # Upstream's source with one edit each (upstream_mutants.py).
    _entry(f"mutant.sglang.{name.replace('_', '.', 1)}", f"upstream_mutants:{name}",
           MUTATIONS[name][2].why, MUTANT, requires="sglang",
           preconditions=TOKEN if name.startswith("token") else PAGED)
    for name in MUTATIONS
)
