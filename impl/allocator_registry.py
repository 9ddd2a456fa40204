"""Allocator classes by name (target "allocator"): the bundled one, the mutant catalogue, and outside
classes by import path `package.module:Class` with upstream's constructor. Nothing is imported
until a class is loaded, so listing never imports torch."""

from __future__ import annotations

from dataclasses import dataclass

from kvfuzz.impl.registry import BUNDLED, MUTANT, OUTSIDE, ImplementationError, load_attribute

UPSTREAM = "sglang.srt.mem_cache.allocator.paged:PagedTokenToKVPoolAllocator"


@dataclass(frozen=True)
class AllocatorImpl:
    name: str
    path: str
    summary: str
    kind: str = BUNDLED

    def load(self):
        return load_attribute(self.path)


ALLOCATORS = (
    AllocatorImpl("allocator.torch", "kvfuzz.impl.allocator.paged_allocator:PagedAllocator",
                  "PagedAllocator: vectorized torch, upstream interface"),
    AllocatorImpl("mutant.allocator.free_no_dedup", "kvfuzz.impl.allocator.mutants:FreeWithoutDedup",
                  "free without per-call dedup", MUTANT),
    AllocatorImpl("mutant.allocator.lost_at_merge", "kvfuzz.impl.allocator.mutants:LostAtMerge",
                  "freed pages lost at merge", MUTANT),
    AllocatorImpl("mutant.allocator.failed_alloc_advances",
                  "kvfuzz.impl.allocator.mutants:FailedAllocAdvances",
                  "a failed allocation advances the free list", MUTANT),
    AllocatorImpl("mutant.allocator.padding_page", "kvfuzz.impl.allocator.mutants:PaddingPageHandedOut",
                  "the padding page handed out", MUTANT),
)


def allocators(kind: str | None = None) -> list[AllocatorImpl]:
    return [entry for entry in ALLOCATORS if kind is None or entry.kind == kind]


def resolve_allocator(spec: str) -> AllocatorImpl:
    """A registered name, or an outside class `package.module:Class` (checked to import now)."""
    if ":" in spec:
        load_attribute(spec)
        return AllocatorImpl(spec, spec, "outside allocator class", OUTSIDE)
    for entry in ALLOCATORS:
        if entry.name == spec:
            return entry
    known = ", ".join(entry.name for entry in ALLOCATORS)
    raise ImplementationError(f"unknown implementation {spec!r} for target 'allocator' "
                              f"(known: {known}; or give package.module:Class)")
