"""A user's module that re-exports SGLang's released allocator under its own name (as a package
wrapping upstream would): it keeps the upstream entry's preconditions, and imports at all only
with the upstream import environment prepared."""

from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator

Allocator = PagedTokenToKVPoolAllocator
