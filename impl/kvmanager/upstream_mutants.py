"""Broken variants of the released vLLM `KVCacheManager` (vllm 0.33.0) and the objects it is made
of (its coordinator, its single-type managers, its block pool): ONE edit inside one method each
(`impl/source_mutation.py`), built on first use. They need vllm installed.

The manager builds its parts through registries and module-level names, so a mutant cannot swap
in an edited module. Instead the edited method is compiled from the edited source and bound to
the manager's own part objects after construction, with the ORIGINAL module's globals (so every
other name it uses is the released one): exactly one edit, everything else as released. A
classmethod called through its class (`find_longest_cache_hit`) cannot be reached this way;
its callers on the coordinator can."""

from __future__ import annotations

import ast
import functools
import importlib
import types
from pathlib import Path

from kvfuzz.impl.source_mutation import Mutation, mutant_module
from kvfuzz.impl.upstream_env import prepare_import

MANAGER = "vllm.v1.core.kv_cache_manager"
COORDINATOR = "vllm.v1.core.kv_cache_coordinator"
SINGLE = "vllm.v1.core.single_type_kv_cache_manager"
POOL = "vllm.v1.core.block_pool"
# vLLM's hashing utilities: the request block hasher the engine builds (not the manager's part)
UTILS = "vllm.v1.core.kv_cache_utils"
# HiSparse's coordinator (built on first use, `get_hisparse_coordinator`: the mutant builds it)
HISPARSE = "vllm.v1.hisparse.coordinator"

# name -> (module, mutation)
MUTATIONS = {
    "last_token_hit": (MANAGER, Mutation(
        "KVCacheManager.get_computed_blocks", "max_cache_hit_length = request.num_tokens - 1",
        "max_cache_hit_length = request.num_tokens",
        "a prompt whose every block is cached hits its last token too (nothing left to compute)")),
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
    # Mamba "align" with prefix caching (the "mamba align" profile, judged in a reduced mode).
    "mamba_align_state_kept": (SINGLE, Mutation(
        "MambaManager._remove_blocks_in_range",
        "self.block_pool.free_blocks(freed)", "pass",
        "in align mode the states a request moved past leave its table but are never freed")),
    "mamba_align_lookahead_state": (SINGLE, Mutation(
        "MambaManager.allocate_new_blocks",
        "num_tokens = num_tokens_main_model", "num_tokens = num_tokens",
        "in align mode a step places its state past its last token (lookahead tokens counted)")),
    # Mamba "align"'s prefill checkpoint blocks (`Trace.mamba_checkpoint`, issue 25's gap).
    "mamba_align_checkpoint_not_taken": (SINGLE, Mutation(
        "MambaManager.get_num_blocks_to_allocate",
        "if not self._needs_internal_checkpoint(",
        "if True or not self._needs_internal_checkpoint(",
        "a chunk past a valid prefill checkpoint takes no checkpoint block for the state it "
        "exports there")),
    "mamba_align_checkpoint_every_chunk": (SINGLE, Mutation(
        "MambaManager._needs_internal_checkpoint",
        "and query_end >= prefill_end\n", "\n",
        "under retention 0 every prefill chunk takes a checkpoint block, not only the one that "
        "ends the prefill (the others' states are never kept)")),
    "mamba_align_speculative_dropped": (SINGLE, Mutation(
        "MambaManager.allocate_new_blocks",
        "cdiv(num_tokens, self.block_size) + self.num_speculative_blocks",
        "cdiv(num_tokens, self.block_size)",
        "in align mode a step allocates no speculative blocks (multi-token prediction's draft "
        "states), though it counted them")),
    # Mamba "align"'s hit length (`oracle/kvmanager/align_hit.py`): the hybrid hit search's
    # lookups capped a hash block below their candidate; the Mamba group's lookup probing block
    # boundaries only. Both hits stay well-formed (each block cached under the request's hash).
    "mamba_align_hit_short": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit",
        "_max_length = curr_hit_length\n", "_max_length = max(curr_hit_length - "
        "self.hash_block_size, 0)\n",
        "each group's lookup of the hybrid hit search is capped a hash block below the "
        "candidate: a hit a hash block short (or shorter, to an earlier cached state)")),
    "mamba_align_partial_hit_ignored": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit",
        "alignment_tokens=self._cache_hit_alignment_tokens,",
        "alignment_tokens=group_block_size if isinstance(spec, MambaSpec)\n"
        "                    else self._cache_hit_alignment_tokens,",
        "the Mamba group's lookup ignores its partial entries (states cached at a hash "
        "boundary inside a block): a hit ends at a block boundary where a longer one is "
        "cached")),
    # Mamba "align" under sparse retention (`fuzz/kvmanager/align_retention.py`).
    "mamba_align_replay_state_dropped": (SINGLE, Mutation(
        "MambaManager.reachable_block_mask",
        "for boundary_tokens in reachable_boundaries:", "for boundary_tokens in ():",
        "under retention 0 a Mamba group keeps no state at the replay boundary: a resend of a "
        "prompt finds nothing to resume from")),
    # HiSparse's source group on its host pool (the "hisparse" profile, judged in a reduced
    # mode): a retained host hit kept past the tokens adopted; pages published before their
    # write-backs are done.
    "hisparse_retained_hit_kept": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots", ": cdiv(reused, manager.block_size)",
        ": cdiv(reused, manager.block_size) + 1",
        "an admission keeps one of the source group's retained hit blocks past the tokens it "
        "adopts")),
    "hisparse_published_before_durable": (SINGLE, Mutation(
        "HiSparseSourceManager.cache_blocks", "self.coordinator.publish_when_ready(",
        "self.publish_blocks(",
        "the source group publishes a page's hash when computed, before its write-back to the "
        "host is done")),
    # A second connector's import into HiSparse's host pool (the "hisparse import" profile).
    "hisparse_import_covers_hit_only": (SINGLE, Mutation(
        "HiSparseSourceManager.allocate_external_computed_blocks",
        "request_id, num_local_computed_tokens + num_external_computed_tokens\n        )",
        "request_id, num_local_computed_tokens\n        )",
        "the coordinator is told an import fills the local hit only: the imported pages never "
        "become ready, and the request publishes nothing past its hit")),
    # Cross-attention (an encoder-decoder model's, caching off: the "cross attention" profile).
    "cross_sized_by_decoder": (COORDINATOR, Mutation(
        "KVCacheCoordinator.allocate_new_blocks",
        "num_encoder_tokens\n                if isinstance",
        "num_tokens\n                if isinstance",
        "a cross-attention group gets blocks for the decoder's tokens, not the encoder's")),
    # KV connectors (the "connector" profile): external tokens, asynchronous loads, zeroing.
    "external_on_null_block": (SINGLE, Mutation(
        "SingleTypeKVCacheManager.allocate_external_computed_blocks",
        "allocated_blocks = self.block_pool.get_new_blocks(num_new_blocks)",
        "allocated_blocks = [self._null_block] * num_new_blocks",
        "the connector's external tokens get the null block, not blocks of their own")),
    "delayed_load_cached": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots", "if delay_cache_blocks:",
        "if delay_cache_blocks and num_external_computed_tokens == 0:",
        "an asynchronous load's blocks are cached at admission, before the load is reported")),
    "reserved_blocks_ignored": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "self.block_pool.get_num_free_blocks() - reserved_blocks",
        "self.block_pool.get_num_free_blocks()",
        "an asynchronous load may take the blocks reserved for the prefills in flight")),
    "loaded_blocks_zeroed": (COORDINATOR, Mutation(
        "KVCacheCoordinator.allocate_new_computed_blocks",
        "record_for_zeroing=i not in skip_zeroing_group_ids",
        "record_for_zeroing=True",
        "the blocks an asynchronous load writes are recorded for zeroing too (a race)")),
    "partial_load_skips_all_zeroing": (COORDINATOR, Mutation(
        "KVCacheCoordinator.allocate_new_computed_blocks",
        "record_for_zeroing=i not in skip_zeroing_group_ids",
        "record_for_zeroing=not skip_zeroing_group_ids",
        "a load of some groups leaves every group's external blocks unzeroed (the groups it "
        "does not write keep stale bytes)")),
    # With groups of different block sizes (the "connector sizes" profile): each
    # group counts its external blocks to the next scheduler block (the hit's grid), not to
    # the external tokens' end; with one block size the two are the same expression.
    "external_to_scheduler_block": (SINGLE, Mutation(
        "SingleTypeKVCacheManager.allocate_external_computed_blocks",
        "cdiv(num_total_computed_tokens, self.block_size) - len(req_blocks)",
        "cdiv(num_total_computed_tokens, self.scheduler_block_size)\n"
        "            * self.scheduler_block_size // self.block_size - len(req_blocks)",
        "a group of blocks smaller than the scheduler block gets external blocks up to its end, "
        "past the external tokens")),
    # A KV connector beside a Mamba "align" group (the "mamba connector" profile alone calls
    # `truncate_computed_blocks`: a local hit ending inside a block dropped for a longer load)
    "mamba_truncate_keeps_partial_state": (MANAGER, Mutation(
        "KVCacheManager.truncate_computed_blocks",
        "num_blocks = min(num_blocks, len(group_blocks))",
        "num_blocks = len(group_blocks)",
        "a Mamba group's local hit cut to the block keeps its partial state: where the load "
        "ends in that block, its last state lands in the hit's cached block")),
    "zeroing_skips_first_block": (MANAGER, Mutation(
        "KVCacheManager.record_blocks_for_zeroing",
        "start_idx = start_token // mgr.block_size",
        "start_idx = start_token // mgr.block_size + 1",
        "after a failed load the first block past the valid prefix is not zeroed")),
    # Zeroing under vLLM's own scheduler (mixed precision, guarded): a new block left out of
    # the records, or the records kept after the scheduler took them (zeroed again later,
    # while the request's KV is in them).
    "new_block_not_zeroed": (SINGLE, Mutation(
        "SingleTypeKVCacheManager.allocate_new_blocks",
        "self.new_block_ids.extend(b.block_id for b in new_blocks)",
        "self.new_block_ids.extend(b.block_id for b in new_blocks[1:])",
        "an allocation's first new block is not recorded for zeroing (another precision's "
        "stale bytes read as KV)")),
    "zeroing_records_kept": (SINGLE, Mutation(
        "SingleTypeKVCacheManager.take_new_block_ids", "self.new_block_ids = []",
        "self.new_block_ids = list(ids)",
        "the records stay after the scheduler takes them: written blocks are zeroed again at "
        "the next step")),
    "connector_hit_diverged": (MANAGER, Mutation(
        "KVCacheManager.get_computed_blocks_for_connector",
        "return *self.get_computed_blocks(request, max_cache_hit_length), False\n\n        if",
        "return *self.get_computed_blocks(request, max_cache_hit_length), True\n\n        if",
        "the connector's lookup says the hit diverged without a Mamba group (the scheduler "
        "then looks again)")),
    "deferred_free_reversed": (MANAGER, Mutation(
        "KVCacheManager.pop_blocks_for_free",
        "return self.coordinator.pop_blocks_for_free(request.request_id)",
        "return self.coordinator.pop_blocks_for_free(request.request_id)[::-1]",
        "a deferred free's blocks come back tail first: the scheduler's reversed drain then "
        "frees the prefix first")),
    "deferred_free_first_group_only": (COORDINATOR, Mutation(
        "KVCacheCoordinator.pop_blocks_for_free", "for manager in self.single_type_managers:",
        "for manager in self.single_type_managers[:1]:",
        "a deferred free pops the full-attention group's blocks alone: the sliding-window "
        "group's stay in its table, never freed")),
    "finished_window_kept": (MANAGER, Mutation(
        "KVCacheManager.remove_skipped_blocks",
        "request_id, processed_computed_tokens, num_prompt_tokens",
        "request_id, 0, num_prompt_tokens",
        "the scheduler's remove_skipped_blocks before a connector's request_finished frees "
        "nothing: the connector reads (and sends) blocks the window skips")),
    "pool_reuse_keeps_hash": (POOL, Mutation(
        "BlockPool.get_new_blocks", "self._maybe_evict_cached_block(block)\n", "pass\n",
        "the manager's pool hands out a cached block and keeps its cache entry")),
    # Requests with extra hash keys (the "extra keys" profile): vLLM's request block hasher
    # (`get_request_block_hasher`), which the engine builds and the driver too.
    "lora_key_dropped": (UTILS, Mutation(
        "_gen_lora_extra_hash_keys", "if not lora_request:", "if True:",
        "a LoRA request's blocks hash as the base model's: requests of different adapters (or "
        "none) share KV")),
    "salt_on_every_block": (UTILS, Mutation(
        "generate_block_hash_extra_keys", "if (start_token_idx == 0 and request.cache_salt)",
        "if request.cache_salt",
        "the cache salt goes into every block's extra keys, not the first block's alone")),
    "mm_offset_ignored": (UTILS, Mutation(
        "_gen_mm_extra_hash_keys",
        'extra_keys.append(("mm", mm_feature.identifier, offset - start_token_idx))',
        'extra_keys.append(("mm", mm_feature.identifier, 0))',
        "an image's key leaves out where it starts in the block: the same image one token "
        "later over the same placeholder tokens shares the block")),
    # Lookahead hashing (the "lookahead hashes" profile): a block hashed before the tokens
    # after it that its hash covers exist.
    "lookahead_hash_early": (UTILS, Mutation(
        "get_request_block_hasher",
        "num_tokens = request.num_tokens - num_hash_lookahead_tokens",
        "num_tokens = request.num_tokens",
        "a block is hashed as soon as it is full, over the lookahead tokens there are so far: "
        "its hash misses the ones still to come")),
    # EAGLE groups flagged apart (the "eagle groups" profile): the drop, or the peek block a
    # step caches for it, taken by every group when only the flagged ones should.
    "eagle_drop_every_group": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit",
        "drop_eagle_block = use_eagle and idx not in eagle_verified",
        "drop_eagle_block = bool(self.drop_eagle_group_ids) and idx not in eagle_verified",
        "with a draft model's group flagged, every group's hit drops a block, not the flagged "
        "group's alone")),
    "eagle_peek_every_group": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.get_num_cacheable_tokens",
        "if manager.use_eagle and cached_num_computed_tokens > 0:",
        "if self.drop_eagle_group_ids and cached_num_computed_tokens > 0:",
        "with a draft model's group flagged, every group caches the block past the scheduler "
        "grid that only the flagged group's lookup peeks at")),
    # Multi-token prediction (the "mtp" profile): the re-prefillable tokens cached.
    "mtp_reprefillable_cached": (COORDINATOR, Mutation(
        "KVCacheCoordinator.get_num_cacheable_tokens",
        "return max(0, num_computed_tokens - self.num_reprefillable_tokens)",
        "return num_computed_tokens",
        "with multi-token prediction, the unitary coordinator caches the last computed tokens "
        "the drafter may re-prefill")),
    "mtp_peek_past_finalized": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.get_num_cacheable_tokens",
        "0, num_computed_tokens - self.num_reprefillable_tokens",
        "0, num_computed_tokens",
        "with multi-token prediction, a group that takes EAGLE's drop caches its peek block "
        "over tokens the drafter may re-prefill")),
    # Prompt embeddings (the "prompt embeds" profile): a block's embeddings left out of its
    # hash.
    "embeds_key_dropped": (UTILS, Mutation(
        "_gen_prompt_embeds_extra_hash_keys", "if request.prompt_embeds is None:", "if True:",
        "a prompt given as embeddings hashes as its token ids (zeros): prompts of other "
        "embeddings share KV")),
    # ... and the pool's KV events of them (the hashes stay right: only a consumer sees it)
    "event_keys_from_step_start": (POOL, Mutation(
        "BlockPool.cache_full_blocks", "block_start = i * block_size",
        "block_start = (i - num_cached_blocks) * block_size",
        "a Stored event's extra keys are read as if its first block started the request: a "
        "later step's first block carries the salt, its images at the wrong offsets")),
    # Spec-decode padding (the "lookahead hashes" profile's padded admissions): the manager
    # counts only the request's own tokens, as kvfuzz's trace did before `Schedule.pad`.
    "spec_pad_rows_clamped": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "num_tokens_main_model = total_computed_tokens + num_new_tokens",
        "num_tokens_main_model = total_computed_tokens + min(\n"
        "            num_new_tokens, request.num_tokens - total_computed_tokens)",
        "a padded admission's placeholder draft rows get no slots: the block for the rows "
        "past the request's tokens is missing")),
    # The same under a KV connector and after its load (the "connector" profile's padded
    # admissions): the rows of a synchronous load's last token, and of the allocation that
    # resumes a request whose load left one token, clamped to the request's tokens.
    "spec_pad_external_clamped": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "num_tokens_main_model = total_computed_tokens + num_new_tokens",
        "num_tokens_main_model = total_computed_tokens + (min(\n"
        "            num_new_tokens, request.num_tokens - total_computed_tokens)\n"
        "            if num_external_computed_tokens else num_new_tokens)",
        "a padded admission with external tokens (a synchronous load leaving one token) gets "
        "no slots for its placeholder draft rows: a block short where they pass a block's end")),
    "spec_pad_resumed_clamped": (MANAGER, Mutation(
        "KVCacheManager.allocate_slots",
        "num_tokens_main_model = total_computed_tokens + num_new_tokens",
        "num_tokens_main_model = total_computed_tokens + (min(\n"
        "            num_new_tokens, request.num_tokens - total_computed_tokens)\n"
        "            if request.status == RequestStatus.WAITING\n"
        "            and request.num_computed_tokens else num_new_tokens)",
        "the allocation resuming a request whose KV load left one token, padded, gets no "
        "slots for its placeholder draft rows")),
}

# Mutants that only a profile reaches whose share of the mix lies past the seeded traces the
# catalogue's tests search (its first index 225): outside the catalogue, by import path
# (`kvfuzz.impl.kvmanager.upstream_mutants:NAME`), each with the test that kills it
ALONE_MUTATIONS = {
    # HiSparse's host copy-on-write (the "hisparse cow" profile): a copy's source reference
    # dropped when the copy is handed to the worker, not once the worker reports it run.
    "hisparse_cow_source_not_held": (HISPARSE, Mutation(
        "HiSparseCoordinator.take_host_block_copies",
        "self._retained_copies[cow_block.block_id] = (source_block, cow_block)",
        "self._retained_copies[cow_block.block_id] = (cow_block,)\n"
        "            self.host_manager.block_pool.free_blocks([source_block])",
        "a host copy's source block is released when the copy is handed to the worker, "
        "before the worker reports it run: a same-step free may recycle the page it reads")),
}


def _rebind(function, original_module, original_class):
    """`function` (from the edited copy) with the original module's globals, and `super()`
    resolving against the original class."""
    cells = []
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        cells.append(types.CellType(original_class) if name == "__class__" else cell)
    return types.FunctionType(function.__code__, vars(original_module), function.__name__,
                              function.__defaults__, tuple(cells) or None)


# The hasher's call chain, rebound to see the edited function: the factory, its extra keys'
# gatherer and the gatherer's parts (every other name stays the released module's)
HASHER_CHAIN = ("get_request_block_hasher", "generate_block_hash_extra_keys",
                "_gen_mm_extra_hash_keys", "_gen_lora_extra_hash_keys",
                "_gen_prompt_embeds_extra_hash_keys")


def _hasher_mutant(name: str, mutation: Mutation):
    """The released manager with an edited request block hasher factory
    (`request_block_hasher`, which the driver builds its requests' hasher with, as the engine
    builds its own with `get_request_block_hasher`): the edited function from the edited copy,
    the chain that calls it rebound to a namespace where it is found, every other name (the
    hash of a block, NONE_HASH) the released module's own."""
    with prepare_import(UTILS):
        original = importlib.import_module(UTILS)
        manager_module = importlib.import_module(MANAGER)
    scope = dict(vars(original))
    for part in HASHER_CHAIN:
        source = vars(original)[part]
        scope[part] = types.FunctionType(source.__code__, scope, part, source.__defaults__,
                                         source.__closure__)
    # the edited function alone compiled into that namespace (the module's own top level,
    # its dataclasses, never run twice)
    path = Path(original.__file__)
    tree = ast.parse(mutation.apply(path.read_text(), str(path)))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and
                n.name == mutation.scope)
    exec(compile(ast.Module([node], []), f"<{name} of {path}>", "exec"), scope)

    class Mutant(manager_module.KVCacheManager):
        request_block_hasher = staticmethod(scope["get_request_block_hasher"])

    Mutant.__name__ = Mutant.__qualname__ = f"KVCacheManager_{name}"
    return Mutant


# Mutants of a base class's method that a subclass overrides: bound only to the parts whose own
# class does not override it (one edit: the subclass's method stays as released)
KEEPS_OVERRIDES = {"mtp_reprefillable_cached"}


def _defines(part, method: str, owner) -> bool:
    """Whether `part`'s `method` is `owner`'s (not a subclass's override)."""
    return next(cls for cls in type(part).__mro__ if method in vars(cls)) is owner


@functools.cache
def _mutant_class(name: str):
    module_name, mutation = MUTATIONS[name] if name in MUTATIONS else ALONE_MUTATIONS[name]
    if module_name == UTILS:
        return _hasher_mutant(name, mutation)
    class_name, method = mutation.scope.split(".")
    with prepare_import(module_name):
        original = importlib.import_module(module_name)
        manager_module = importlib.import_module(MANAGER)
    edited = mutant_module(module_name, mutation, f"vllm_kvmanager_{name}")
    owner = getattr(original, class_name)
    edited_method = vars(getattr(edited, class_name))[method]
    if isinstance(edited_method, classmethod):  # called on the instance, bound to its class
        function = _rebind(edited_method.__func__, original, owner)
        bind = lambda part: types.MethodType(function, type(part))  # noqa: E731
    else:
        function = _rebind(edited_method, original, owner)
        bind = lambda part: types.MethodType(function, part)  # noqa: E731
    base = manager_module.KVCacheManager

    class Mutant(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            coordinator = self.coordinator
            parts = [self, coordinator, self.block_pool, *coordinator.single_type_managers]
            if module_name == HISPARSE and \
                    getattr(self.kv_cache_config, "hisparse_host_num_blocks", None):
                parts.append(original.get_hisparse_coordinator(self))  # (memoised: the driver's)
            for part in parts:
                if isinstance(part, owner) and (name not in KEEPS_OVERRIDES or
                                                _defines(part, method, owner)):
                    setattr(part, method, bind(part))

    Mutant.__name__ = Mutant.__qualname__ = f"KVCacheManager_{name}"
    return Mutant


def __getattr__(name: str):
    """The mutant class `name` (a key of MUTATIONS or ALONE_MUTATIONS)."""
    if name not in MUTATIONS and name not in ALONE_MUTATIONS:
        raise AttributeError(name)
    return _mutant_class(name)
