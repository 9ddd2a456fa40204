"""The SWA trace's ops for what a scheduler does beyond growing and releasing its requests: a
finished request kept by the prefix cache, room reclaimed through that cache, the pools resized
once they are measured, a retracted request's KV copied out and back, and caller bugs on
purpose. Standard library only; `trace.py` holds the format."""

from __future__ import annotations

from dataclasses import dataclass

# Which pool's available size a `Reclaim`'s demand is measured from, and the prefix cache the
# scheduler hands the allocator: "radix" holds the cached requests (SGLang's radix caches),
# "chunk" shares no prefix (its `supports_prefix_sharing()` is False: a chunk cache), "none"
# is no cache at all.
RECLAIM_POOLS = ("full", "swa")
TREES = ("radix", "chunk", "none")
# Caller bugs, each rejected with nothing changed where the trace's checks see it (`debug`:
# SGLANG_DEBUG_MEMORY_POOL, `strict`: SGLANG_INVARIANT_CHECK at its strict level), and never
# made where they do not:
#   swa_evicted_twice  free_swa_segment of window pages already released (debug above page
#                      size 1, strict): the released class would release the padding page
#   full_while_mapped  free_full / free_full_segment of slots that still have an SWA peer
#                      (strict): the peer would be stranded
#   segment_unaligned  free_swa_segment / free_segment from inside a page (every mode)
#   alloc_paged        alloc(n) above page size 1, where upstream has only the extend and
#                      decode calls (every mode)
#   tail_batch         alloc_extend_swa_tail of two requests at once (every mode)
#   tail_outside       alloc_extend_swa_tail with a tail longer than the extend, or negative
#                      (every mode)
#   paged_at_token     alloc_extend, alloc_decode or alloc_extend_swa_tail at page size 1,
#                      where upstream has only alloc (every mode)
MISUSES = ("swa_evicted_twice", "full_while_mapped", "segment_unaligned", "alloc_paged",
           "tail_batch", "tail_outside", "paged_at_token")
EVERY_MODE = ("segment_unaligned", "alloc_paged", "tail_batch", "tail_outside", "paged_at_token")


@dataclass(frozen=True)
class Cache:
    """The request finishes into the prefix cache (SGLang's `cache_finished_req`): its full
    slots, and the SWA slots of its window, stay held by the cache until a `Reclaim` evicts
    them (oldest first) or a clear."""

    rid: int


@dataclass(frozen=True)
class Reclaim:
    """The scheduler makes room through its prefix cache: `evict_to_free_tokens(tree_cache, n)`
    (before an allocation, and in the decode memory check), or with `prealloc`,
    `reclaim_for_prealloc(tree_cache, n, n)` (a decode server's preallocation, SWA side), where
    n is the `pool`'s available size plus `delta`, at least 0. The cache (`tree`, `TREES`)
    evicts cached requests oldest first: whole ones for the full shortfall it is asked, their
    SWA side only for the SWA shortfall."""

    delta: int
    pool: str = "swa"
    prealloc: bool = False
    tree: str = "radix"


@dataclass(frozen=True)
class Resize:
    """`resize(config)` to `size` full and `size_swa` SWA tokens (SGLang sizes the pools again
    once the CUDA graphs are captured, before serving): both pools fresh, the mapping empty;
    at most the sizes the allocator was built with (its mapping is not rebuilt)."""

    size: int
    size_swa: int


@dataclass(frozen=True)
class Offload:
    """A retracted request's KV copied to the host and back (`get_cpu_copy`, then
    `load_cpu_copy` of that copy), through the allocator to its KV pool."""

    rid: int


@dataclass(frozen=True)
class Misuse:
    """A caller bug on purpose (`MISUSES`); `salt` picks the request and the slots."""

    kind: str
    salt: int = 0


def describe(op) -> str:
    if isinstance(op, Cache):
        return f"finish r{op.rid} into the prefix cache"
    if isinstance(op, Reclaim):
        call = "reclaim_for_prealloc" if op.prealloc else "evict_to_free_tokens"
        return f"{call}({op.tree} cache, {op.pool} available {op.delta:+d})"
    if isinstance(op, Resize):
        return f"resize to {op.size} full + {op.size_swa} SWA tokens"
    if isinstance(op, Offload):
        return f"offload r{op.rid} to the host and back"
    return f"misuse {op.kind} (salt {op.salt})"
