"""The catalogue of `upstream_mutants` (vllm 0.33.0's `KVCacheManager` and its parts), part 1:
the modules the mutants edit, and the mutants of the configurations the first profiles drive (one
full-attention group, a sliding window, the scheduler's reads, speculative decoding, groups of
different block sizes, chunked-local attention, Mamba without caching, EAGLE beside a window).
Each entry: name -> (module, one edit), the edit's scope a method of that module's class."""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation

MANAGER = "vllm.v1.core.kv_cache_manager"
COORDINATOR = "vllm.v1.core.kv_cache_coordinator"
SINGLE = "vllm.v1.core.single_type_kv_cache_manager"
POOL = "vllm.v1.core.block_pool"
# vLLM's hashing utilities: the request block hasher the engine builds (not the manager's part)
UTILS = "vllm.v1.core.kv_cache_utils"
# HiSparse's coordinator (built on first use, `get_hisparse_coordinator`: the mutant builds it)
HISPARSE = "vllm.v1.hisparse.coordinator"

# name -> (module, mutation)
CORE = {
    "last_token_hit": (MANAGER, Mutation(
        "KVCacheManager.get_computed_blocks", "max_cache_hit_length = request.num_tokens - 1",
        "max_cache_hit_length = request.num_tokens",
        "a prompt whose every block is cached hits its last token too (nothing left to compute)")),
    # the caller's cap (the scheduler's, with auxiliary outputs on: the "capped hits" profile)
    "caller_cap_ignored": (MANAGER, Mutation(
        "KVCacheManager.get_computed_blocks", "if max_cache_hit_length is None:",
        "if True:",
        "a lookup ignores the caller's max_cache_hit_length and hits up to num_tokens - 1")),
    # the same at a KV connector's lookup without a Mamba group ("capped connector")
    "connector_cap_ignored": (MANAGER, Mutation(
        "KVCacheManager.get_computed_blocks_for_connector",
        "return *self.get_computed_blocks(request, max_cache_hit_length), False\n\n        if",
        "return *self.get_computed_blocks(request), False\n\n        if",
        "a connector's lookup drops the caller's max_cache_hit_length and hits up to "
        "num_tokens - 1")),
    "exact_fit_refused": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots", "if required_blocks > available_blocks:",
        "if required_blocks >= available_blocks:",
        "an allocation needing exactly the free blocks is refused")),
    "caches_unwritten_block": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "total_computed_tokens + num_new_tokens,\n            request.num_tokens,",
        "total_computed_tokens + num_new_tokens + self.coordinator.scheduler_block_size,\n"
        "            request.num_tokens,",
        "allocate_slots caches the block after the scheduled tokens, not yet written")),
    "window_moves_early": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "max(0, total_computed_tokens - request.num_in_flight_tokens)",
        "max(0, total_computed_tokens + num_new_tokens - request.num_in_flight_tokens)",
        "sliding-window blocks are freed for tokens scheduled, not yet computed")),
    "free_first_group_only": (COORDINATOR, Mutation(
        "KVCacheCoordinator.free", "for manager in self.single_type_managers:",
        "for manager in self.single_type_managers[:1]:",
        "free() returns the full-attention group's blocks and leaks the sliding-window group's")),
    "evictable_hits_not_counted": (SINGLE, Mutation(
        "SingleTypeKVCacheManager.get_num_blocks_to_allocate",
        "return num_new_blocks + num_evictable_blocks", "return num_new_blocks",
        "the admission count leaves out hit blocks that are free (touching them uses them up)")),
    "free_head_first": (SINGLE, Mutation(
        "SingleTypeKVCacheManager.free",
        "self.block_pool.free_blocks(reversed(self.pop_blocks_for_free(request_id)))",
        "self.block_pool.free_blocks(self.pop_blocks_for_free(request_id))",
        "a request's blocks are freed head first: its prefix is evicted before its tail")),
    "hit_not_touched": (SINGLE, Mutation(
        "SingleTypeKVCacheManager.add_local_computed_blocks",
        "self.block_pool.touch(new_computed_blocks)", "pass",
        "an admitted request's hit blocks get no reference (a later free underflows)")),
    "window_keeps_first_block": (SINGLE, Mutation(
        "SingleTypeKVCacheManager._remove_blocks_in_range",
        "for i in range(last_block - 1, first_block - 1, -1):",
        "for i in range(last_block - 1, first_block, -1):",
        "the first block to leave a sliding window is never freed")),
    "hybrid_hit_not_trimmed": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit",
        "del blks[num_blocks:]", "pass",
        "with both groups, the full-attention hit is not cut to the sliding-window hit")),
    "whole_request_unchecked": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "if required_blocks > self.block_pool.get_num_free_blocks():", "if False:",
        "full_sequence_must_fit admits a request whose whole sequence does not fit")),
    "sparse_tail_one_block_early": (SINGLE, Mutation(
        "SlidingWindowManager.reachable_block_mask", "end = aligned // block_size + shift",
        "end = aligned // block_size + shift - 1",
        "sparse retention keeps the window before the prompt's last full block, not up to it")),
    "watermark_for_running": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "if has_scheduled_reqs and request.status in (", "if request.status not in (",
        "the watermark is kept on running requests' steps instead of admissions")),
    # The configurations beyond the simplest (docs/upstream-vllm.md): caching off, requests
    # that skip the cache, KV events and stats, speculative decoding, asynchronous scheduling,
    # extra retained tokens, steps of no tokens, the scheduler's reads.
    "lookahead_not_allocated": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "num_tokens_main_model + num_lookahead_tokens, self.max_model_len",
        "num_tokens_main_model, self.max_model_len",
        "speculative (lookahead) tokens get no slots: the draft model writes past the table")),
    "in_flight_ignored": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "max(0, total_computed_tokens - request.num_in_flight_tokens)",
        "max(0, total_computed_tokens)",
        "sliding-window blocks are freed while a step still in flight reads them (async "
        "scheduling)")),
    "skip_reading_ignored": (MANAGER, Mutation(
        "KVCacheManager.prefix_cache_lookup_enabled",
        "return self.enable_caching and not request.skip_reading_prefix_cache",
        "return self.enable_caching",
        "a request that must skip the prefix cache (prompt logprobs) reads it")),
    "zero_tokens_accepted": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "num_new_tokens == 0\n            and num_external_computed_tokens == 0",
        "num_new_tokens < 0\n            and num_external_computed_tokens == 0",
        "allocate_slots of no tokens and no hit is accepted, not refused as the caller's bug")),
    "stats_preempted_as_new": (MANAGER, Mutation(
        "KVCacheManager.record_prefix_cache_stats", "preempted=request.num_preemptions > 0",
        "preempted=False",
        "a preempted request's admission counts in the stats as a new request's")),
    "reset_not_in_stats": (MANAGER, Mutation(
        "KVCacheManager.reset_prefix_cache", "self.prefix_cache_stats.reset = True", "pass",
        "the prefix-cache stats never say the cache was reset")),
    "hit_report_skipped": (MANAGER, Mutation(
        "KVCacheManager.get_computed_blocks",
        "self.coordinator.emit_cached_block_events(request, computed_blocks)", "pass",
        "a request that asks its hits reported (kv_cache_report_mode full) gets no events")),
    "events_unannotated": (MANAGER, Mutation(
        "KVCacheManager.take_events", "event.kv_cache_spec_kind = kind", "pass",
        "KV events do not say which kind of group their blocks are in")),
    "estimate_takes_longest": (MANAGER, Mutation(
        "KVCacheManager.estimate_cached_tokens",
        "else min(cached_tokens, group_cached_tokens)",
        "else max(cached_tokens, group_cached_tokens)",
        "estimate_cached_tokens takes the longest group's cached prefix, not the shortest")),
    "computed_ids_unclipped": (MANAGER, Mutation(
        "KVCacheManager.get_block_ids_for_computed_tokens",
        "clipped_block_ids.append(ids[:num_valid_blocks])", "clipped_block_ids.append(ids)",
        "get_block_ids_for_computed_tokens hands out blocks past the computed tokens")),
    "truncate_one_block_long": (MANAGER, Mutation(
        "KVCacheManager.truncate_computed_blocks",
        "truncated.append(list(group_blocks[:num_blocks]))",
        "truncated.append(list(group_blocks[:num_blocks + 1]))",
        "truncate_computed_blocks keeps one block past the endpoint")),
    "retained_tokens_freed": (SINGLE, Mutation(
        "SlidingWindowManager.get_num_skipped_tokens",
        "num_computed_tokens - self.sliding_window + 1 - self.extra_retained_tokens",
        "num_computed_tokens - self.sliding_window + 1",
        "the sliding window frees the extra retained tokens' blocks (multi-module MTP needs "
        "them)")),
    "eagle_block_kept": (COORDINATOR, Mutation(
        "UnitaryKVCacheCoordinator.find_longest_cache_hit",
        "drop_eagle_block=0 in self.drop_eagle_group_ids", "drop_eagle_block=False",
        "with EAGLE a hit keeps its last block, whose hidden states the drafter needs again")),
    # Groups of different block sizes, hashed per fewer tokens (the "hybrid sizes" profile,
    # `strategies/kvmanager/hybrid.py`): what only a scheduler block above a group's block
    # size, or a hash block below it, shows.
    "hybrid_hit_off_grid": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit",
        "alignment_tokens=self._cache_hit_alignment_tokens,",
        "alignment_tokens=self.hash_block_size,",
        "with groups of different block sizes a hit may end inside a scheduler block (where "
        "one group's block ends, not every group's)")),
    "hybrid_caches_off_grid": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator._align_cacheable",
        "return round_down(num_tokens, self.scheduler_block_size)",
        "return round_down(num_tokens, self.hash_block_size)",
        "a step caches blocks past its last scheduler block, where no hit can end")),
    "partial_tail_past_prompt": (SINGLE, Mutation(
        "FullAttentionManager._cache_partial_tail_block",
        "else request.num_prompt_tokens - 1", "else request.num_prompt_tokens",
        "the partial entry of a prompt's tail takes in its last token, which a resend "
        "recomputes: it names a boundary no lookup of the prompt reaches")),
    # Chunked-local attention (the "chunked local" profile).
    "local_chunk_freed_early": (SINGLE, Mutation(
        "ChunkedLocalAttentionManager.get_num_skipped_tokens",
        "num_computed_tokens // self.attention_chunk_size",
        "(num_computed_tokens + 1) // self.attention_chunk_size",
        "chunked-local attention frees a chunk's blocks while its last token is still to be "
        "computed (it attends to them)")),
    # Mamba ("none"/"all", caching off: the "mamba" profile).
    "mamba_state_freed": (SINGLE, Mutation(
        "MambaManager.get_num_skipped_tokens", "return num_computed_tokens - 1",
        "return num_computed_tokens",
        "a Mamba group frees the state of the last computed token, which the next one reads")),
    # EAGLE beside a sliding window (the "eagle window" profile): the hybrid coordinator's
    # fixed-point search looks each group one drop unit further, then drops it.
    "eagle_margin_dropped": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit",
        "curr_hit_length + eagle_margin,", "curr_hit_length,",
        "with EAGLE beside another group a lookup drops a block without first looking one "
        "further: every hit a block short")),
}
