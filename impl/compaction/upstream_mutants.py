"""Broken variants of the released upstream `MultiEndedAllocator` (sglang 0.5.23): the installed
module's source with ONE edit inside one method each (`impl/source_mutation.py`), run lazily
through the same adapter as the original (`upstream.py`). They need sglang installed."""

from __future__ import annotations

import functools

from kvfuzz.impl.source_mutation import Mutation, mutant_module

MODULE, CLASS = "sglang.srt.mem_cache.allocator.unified_sub_pool", "MultiEndedAllocator"

MUTATIONS = {
    "kv_not_moved": Mutation(
        f"{CLASS}._move_pages", "range(0, src_pages.numel(), self._move_max_pages)", "range(0)",
        "compaction remaps the tables but never copies the KV rows"),
    "pending_overwritten": Mutation(
        f"{CLASS}._commit_move_batch", "cpu_list.extend(srcs)", "cpu_list[:] = srcs",
        "a second move batch under one unfired event replaces the first one's pending pages"),
    "takes_from_the_far_end": Mutation(
        f"{CLASS}._take_free_pages_from_end", "taken, rest = free[:n], free[n:]",
        "taken, rest = free[n_free - n :], free[: n_free - n]",
        "the grow-up pool reuses the freed pages farthest from its base"),
    "pages_not_zeroed": Mutation(
        f"{CLASS}._maybe_zero_pages", "phys_pages.numel() == 0:", "phys_pages.numel() >= 0:",
        "pages are handed out with what their last owner wrote, not zeroed"),
    "clear_keeps_pending": Mutation(
        f"{CLASS}.clear", "self._pending_reuse.clear()", "pass",
        "clear() keeps the move batches pending on an unfired event (their pages come back "
        "as holes of the emptied pool when it fires)"),
    "clear_keeps_group": Mutation(
        f"{CLASS}.clear", "self.free_group = None", "pass",
        "clear() keeps the open free group: what it deferred is freed again at its end, and "
        "frees after the clear stay deferred"),
    "clear_keeps_load_count": Mutation(
        f"{CLASS}.clear", "self._pending_hicache_load_pages = 0", "pass",
        "clear() keeps the count of pages reserved for HiCache load-backs: the emptied pool "
        "moves no page until a load event resets it"),
    "reserve_pages_squared": Mutation(
        f"{CLASS}.alloc_physical", "self.take_physical_pages(need_size // self.page_size)",
        "self.take_physical_pages(need_size * self.page_size)",
        "a load-back reservation above page size 1 takes page_size squared times the pages "
        "asked for"),
}


def __getattr__(name: str):
    """The lazy factory of mutant `name` (a key of MUTATIONS), built from the installed source."""
    if name not in MUTATIONS:
        raise AttributeError(name)
    from kvfuzz.impl.compaction.upstream import UpstreamCompaction  # imports sglang

    module = mutant_module(MODULE, MUTATIONS[name], f"sglang_compaction_{name}")
    return functools.partial(_lazy, UpstreamCompaction, getattr(module, CLASS))


def _lazy(adapter, allocator_class, params, device: str = "cpu"):
    return adapter(params, True, device, allocator_class)
