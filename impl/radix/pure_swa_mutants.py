"""Broken variants of the released SGLang `PureSWARadixCache` (sglang 0.5.23,
`mem_cache/pure_swa_radix_cache.py`): the installed module's source with ONE edit inside one
method each (`impl/source_mutation.py`), built on first use, run on the window traces (their
entries declare the window). Each breaks what an all-SWA scheduler relies on: the SWA sizes its
prefill budget reads, eviction of what it asks with `swa_num_tokens`, and the window the
request's frees keep. They need sglang installed."""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation, mutant_classes

MODULE, CLASS = "sglang.srt.mem_cache.pure_swa_radix_cache", "PureSWARadixCache"

MUTATIONS = {
    # the SWA sizes against the tree's nodes
    "swa_evictable_reads_protected": Mutation(
        f"{CLASS}.swa_evictable_size", "return self.evictable_size_",
        "return self.protected_size_",
        "swa_evictable_size() answers the protected size: the all-SWA prefill budget counts "
        "locked tokens as reclaimable"),
    # eviction frees at least what was asked
    "evict_takes_smaller_ask": Mutation(
        f"{CLASS}.evict", "max(params.num_tokens, params.swa_num_tokens)",
        "min(params.num_tokens, params.swa_num_tokens)",
        "eviction takes the smaller of num_tokens and swa_num_tokens: an ask with "
        "swa_num_tokens alone (reclaim_for_prealloc) frees nothing"),
    # the window's frees
    "window_one_short": Mutation(
        f"{CLASS}.__init__", "self.sliding_window_size = params.sliding_window_size",
        "self.sliding_window_size = params.sliding_window_size - 1",
        "the cache's window is a token short: the window frees a slot the model still attends"),
    "window_one_long": Mutation(
        f"{CLASS}.__init__", "self.sliding_window_size = params.sliding_window_size",
        "self.sliding_window_size = params.sliding_window_size + 1",
        "the cache's window is a token long: each slide frees a slot late, holding it a step"),
    "supports_swa_false": Mutation(
        f"{CLASS}.supports_swa", "return True", "return False",
        "the cache says it has no SWA: the scheduler's maybe_evict_swa never slides a window, "
        "so out-of-window slots stay held"),
    "draft_window_dropped": Mutation(
        f"{CLASS}.__init__", "self.draft_swa_window = params.draft_swa_window", "pass",
        "the draft model's SWA window is dropped (the class default 0): with a speculative "
        "draft whose window is longer, the window frees slots the draft still attends"),
}


__getattr__ = mutant_classes(MODULE, CLASS, MUTATIONS, "sglang_pure_swa")
