"""Where the released SGLang class the compaction adapter drives lives, release by release (no
imports: the catalogue and the adapter both read it)."""

# Today's place (0.5.20 on): what `kvfuzz mutate` edits by default.
UPSTREAM_POOL = "sglang.srt.mem_cache.allocator.unified_sub_pool:MultiEndedAllocator"
# In order: where an earlier release kept it (0.5.15-0.5.19) is tried only where today's module
# is not there (`registry.load_first`); neither (0.5.14 and before): one "not supported" line.
UPSTREAM_POOLS = (UPSTREAM_POOL, "sglang.srt.mem_cache.multi_ended_allocator:MultiEndedAllocator")
