"""The catalogue of `upstream_mutants`, part 2: Mamba "align" with prefix caching, HiSparse's host
source group, cross attention, KV connectors and their zeroing, deferred frees."""

from __future__ import annotations

from kvfuzz.impl.kvmanager.mutant_catalogue import (COORDINATOR, HISPARSE, MANAGER, POOL,
                                                    SINGLE)
from kvfuzz.impl.source_mutation import Mutation

GROUPS = {
    # Mamba "align" with prefix caching (the "mamba align" profile, judged in a reduced mode).
    "mamba_align_state_kept": (SINGLE, Mutation(
        "MambaManager._remove_blocks_in_range",
        "self.block_pool.free_blocks(freed)", "pass",
        "in align mode the states a request moved past leave its table but are never freed")),
    # Which blocks (`fuzz/kvmanager/align_queue.py`): the states freed in one call front
    # first, so the oldest (not the newest) is reused first and the cached ones evicted in
    # the other order; every count, table and reference the other reduced checks see holds.
    "mamba_align_skipped_front_first": (SINGLE, Mutation(
        "MambaManager._remove_blocks_in_range",
        "self.block_pool.free_blocks(freed)", "self.block_pool.free_blocks(freed[::-1])",
        "in align mode the states a step moved past go back to the free queue front first "
        "(the pool reuses, and evicts, them in the other order)")),
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
    # Lookahead hashes beside the group (`Trace.hash_lookahead`): the step's checkpoint placed
    # as if hashes looked no tokens ahead (`get_num_blocks_to_allocate` alone; the re-keying in
    # `_cache_partial_tail_block` still reads the lookahead)
    "mamba_align_checkpoint_lookahead_ignored": (SINGLE, Mutation(
        "MambaManager.get_num_blocks_to_allocate",
        "num_hash_lookahead_tokens=self.block_pool.num_hash_lookahead_tokens,", "",
        "under lookahead hashing a step reserves its prefill checkpoint at the position hashes "
        "looking no tokens ahead would give (one the request may have no hash of yet)")),
    # EAGLE's drop beside the group (`Trace.eagle`): the step's checkpoint reserved as if the
    # Mamba manager's `drop_eagle_checkpoint_block` were off (`get_num_blocks_to_allocate`
    # alone; the re-keying in `_cache_partial_tail_block` still reads it)
    "mamba_align_checkpoint_eagle_ignored": (SINGLE, Mutation(
        "MambaManager.get_num_blocks_to_allocate",
        "                self.drop_eagle_checkpoint_block,\n", "                False,\n",
        "with EAGLE's drop a step reserves its prefill checkpoint where it would without it "
        "(a token below the chunk's end), not at EAGLE's replay boundary a hash block lower")),
    # ... and the Mamba group looked one drop unit past the candidate as full attention is
    # (its finder never drops: the hit can run a unit past full attention's)
    "mamba_align_eagle_margin_to_mamba": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit",
        "if drop_eagle_block and not isinstance(spec, MambaSpec):", "if drop_eagle_block:",
        "with EAGLE beside a Mamba group the Mamba lookup gets the margin too, and never drops "
        "it: a hit a hash unit past full attention's")),
    # ... and multi-module MTP's k - 1 re-prefillable tokens (since 2026-12-07): the Mamba
    # group caching what the step computed, as without EAGLE (full attention still holds them)
    "mamba_align_mtp_held_ignored": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.get_num_cacheable_tokens",
        "if manager.use_eagle and cached_num_computed_tokens > 0:",
        "if manager.use_eagle and cached_num_computed_tokens > 0 and not isinstance(\n"
        "                manager.kv_cache_spec, MambaSpec):",
        "with EAGLE's drop and multi-module MTP the Mamba group caches its states up to the "
        "step's computed tokens, not holding MTP's k - 1 re-prefillable tokens back")),
    # Mamba's shared-prefix checkpoint (`Trace.mamba_shared_prefix`): the junction's entry
    # registered a token past the junction (a position no hash boundary is), so never
    "mamba_align_shared_prefix_junction_missed": (SINGLE, Mutation(
        "MambaManager._cache_partial_tail_block",
        "and num_tokens == request.shared_prefix_boundary\n",
        "and num_tokens == request.shared_prefix_boundary + 1\n",
        "with the shared-prefix checkpoint on, a prefill step ending at the junction does not "
        "key the state it wrote there: a sibling cannot resume at the junction")),
    "mamba_align_speculative_dropped": (SINGLE, Mutation(
        "MambaManager.allocate_new_blocks",
        "cdiv(num_tokens, self.block_size) + self.num_speculative_blocks",
        "cdiv(num_tokens, self.block_size)",
        "in align mode a step allocates no speculative blocks (multi-token prediction's draft "
        "states), though it counted them")),
    # A Mamba group in mode "none" or "all" with speculative blocks (the "mamba" profile's MTP
    # share, `strategies/kvmanager/mamba_speculative.py`): a step takes one speculative block
    # fewer than its count said (none with one draft token); the full oracle's rule.
    "mamba_speculative_one_short": (SINGLE, Mutation(
        "MambaManager.allocate_new_blocks",
        "num_tokens += self.block_size * self.num_speculative_blocks",
        "num_tokens += self.block_size * (self.num_speculative_blocks - 1)",
        'outside mode "align" a step takes one speculative Mamba block fewer than its count '
        "said (none with one draft token)")),
    # Mamba "align"'s count (`oracle/kvmanager/align_count.py`): its cap a block high, so an
    # admission that fits with a block to spare is refused; nothing else changes.
    "mamba_align_cap_one_more": (SINGLE, Mutation(
        "MambaManager.get_num_blocks_to_allocate",
        "physical_block_cap = 1 + int(has_partial_hit) + checkpoint_block",
        "physical_block_cap = 2 + int(has_partial_hit) + checkpoint_block",
        "in align mode the Mamba group counts a block more than a step can take: an "
        "allocation that fits exactly is refused")),
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
    # HiSparse's unpinned resident pages (the "hisparse cow" profile; caught by the free queue's
    # order only, `fuzz/kvmanager/hisparse_queue.py`).
    "hisparse_unpinned_reused_first": (POOL, Mutation(
        "BlockPool.unpin_blocks", "self.free_block_queue.append_n(released)",
        "self.free_block_queue.prepend_n(released)",
        "a clean resident page the coordinator unpins joins the head of the free queue, not "
        "its tail: reused first, where it should be the last resort, so a host hit finds "
        "fewer GPU copies to adopt")),
    # HiSparse's unpins at a request's free (the "hisparse cow" profile; caught by the order of
    # an op's frees at the free queue's tail only, `fuzz/kvmanager/hisparse_order.py`).
    "hisparse_free_unpins_head_first": (HISPARSE, Mutation(
        "HiSparseCoordinator.free", "for page_idx in reversed(range(len(blocks))):",
        "for page_idx in range(len(blocks)):",
        "a freed request's clean pages are unpinned first page first, not tail first: its "
        "prefix's first pages join the free queue's tail before its last ones and are reused "
        "first")),
    # HiSparse's host cache map (the "hisparse cow" profile; caught by the host pool's entries
    # predicted op by op only, `fuzz/kvmanager/hisparse_hostcache.py`).
    "hisparse_host_tail_not_published": (SINGLE, Mutation(
        "HiSparseSourceManager.publish_blocks", "super().cache_blocks(",
        "SingleTypeKVCacheManager.cache_blocks(self, ",
        "the host publishes a request's full pages but never its prompt's partial tail (hashed "
        "per fewer tokens than a block), so no later request finds a partial hit on the host")),
    # HiSparse's resident pages under speculative decoding (the "hisparse cow" profile's traces
    # with lookahead slots; equivalent without them: caught by the resident table's length,
    # `hisparse_checks.table_problems`, since 2026-12-08).
    "hisparse_resident_lookahead_unbacked": (SINGLE, Mutation(
        "HiSparseResidentManager.allocate_new_blocks",
        "del num_tokens_main_model\n        req_blocks = self.req_to_blocks[request_id]\n"
        "        num_new_blocks = cdiv(num_tokens, self.block_size)",
        "req_blocks = self.req_to_blocks[request_id]\n"
        "        num_new_blocks = cdiv(num_tokens_main_model, self.block_size)",
        "the resident pages get no blocks for the draft tokens' lookahead slots (the source "
        "and indexer groups do, and the count asks for them): the draft tokens' KV, written "
        "through the resident row, lands in the null block")),
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
    # Beside a Mamba "align" group (the "mamba connector" profile): the load done's caching a
    # token short. The resumed step caches what it left, so every hit, count and state stays
    # consistent with the pool's map meanwhile: only a prediction of the map's entries after
    # the load sees it (`align_caching_external.py`).
    "mamba_align_load_caches_token_short": (MANAGER, Mutation(
        "KVCacheManager.cache_blocks",
        "self.coordinator.cache_blocks(request, num_computed_tokens)",
        "self.coordinator.cache_blocks(request, num_computed_tokens - 1)",
        "a load reported done caches its blocks up to its last token but one: a block-aligned "
        "load's last block, and a prompt's last boundary state, wait for the resumed step")),
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
    # ... and the Mamba group's view rotated by one (its length kept): a load never reads the
    # view's Mamba blocks (all skipped below its last token), so only the block-aligned hit
    # admitted with nothing loaded, after the caller's cap dropped the external tokens
    # ("capped mamba", `align_tail_drop.py`), adopts them: the partial state at the aligned end
    "mamba_truncate_shifts_partial_state": (MANAGER, Mutation(
        "KVCacheManager.truncate_computed_blocks",
        "num_blocks = min(num_blocks, len(group_blocks))",
        "num_blocks = min(num_blocks, len(group_blocks))\n"
        "                group_blocks = group_blocks[1:] + group_blocks[:1]",
        "a Mamba group's local hit cut to the block moves its partial state into the cut "
        "view's last block: a hit admitted there adopts a state of tokens past it")),
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
    # The finish's remove_skipped_blocks beside a Mamba "align" group (the "mamba connector"
    # profile's `remove_skipped`, `fuzz/kvmanager/align_external.py`): one token too many
    # counted processed, so where the computed tokens end a block the state of the last one
    # (the one a connector's request_finished sends) is freed. At a step the same call frees
    # the state the step reads, which no other check sees (the rule allows it gone).
    "mamba_finish_frees_last_state": (SINGLE, Mutation(
        "MambaManager.remove_skipped_blocks",
        "request_id, processed_computed_tokens, num_prompt_tokens",
        "request_id, processed_computed_tokens + 1, num_prompt_tokens",
        "beside a Mamba align group remove_skipped_blocks frees the state of the last "
        "processed token where it ends a block: a finishing request's connector reads a "
        "freed block")),
    # A KV connector beside a Mamba group in mode "none" or "all" (caching off: the "mamba
    # plain connector" profile): the admission's count takes the states its skipped tokens
    # leave null from the local hit alone, so an external load's (c - 1) // b nulls count as
    # new blocks. Without a connector the local hit is the whole computed prefix (0 with
    # caching off), so only external tokens tell the two apart.
    "mamba_plain_external_states_counted": (SINGLE, Mutation(
        "MambaManager.get_num_blocks_to_allocate",
        "new_computed_blocks,\n                total_computed_tokens,\n",
        "new_computed_blocks,\n                num_local_computed_tokens,\n",
        "beside a Mamba group in mode none or all an admission with external tokens counts "
        "the states it leaves null as blocks to allocate: refused where its blocks fit")),
    # The state a step reads (`fuzz/kvmanager/align_reads.py`): the block allocated two steps
    # ago freed one step early, where the last step read and wrote one column (a partial hit's
    # copy-on-write block): the scheduler nulls the column the worker's next step copies from.
    "mamba_align_read_state_freed": (SINGLE, Mutation(
        "MambaManager.remove_skipped_blocks",
        "< cdiv(processed_computed_tokens, self.block_size) - 1",
        "<= cdiv(processed_computed_tokens, self.block_size) - 1",
        "in align mode a step frees the block its state is read from when the last step "
        "wrote its state there too: the worker copies from a freed block")),
    # Tokens in flight beside a Mamba "align" group (asynchronous scheduling,
    # `fuzz/kvmanager/align_async.py`): a request finishing with a step in flight hands its
    # partial tail off, though that step's forward may still write the block.
    "mamba_align_tail_in_flight": (SINGLE, Mutation(
        "MambaManager.finalize_partial_tail_offload",
        "if num_in_flight_tokens != 0 or num_computed_tokens != boundary_tokens:",
        "if num_computed_tokens != boundary_tokens:",
        "a request finishing with tokens in flight hands off its partial tail's block: the "
        "connector reads a state its step in flight may still write")),
    # KV events beside a Mamba "align" group (`fuzz/kvmanager/align_events.py`): a transient
    # prefill checkpoint's entries dropped without a Removed. The pool's state is the release's:
    # only a consumer replaying the events sees the entries it still routes to.
    "mamba_align_checkpoint_removed_silently": (SINGLE, Mutation(
        "MambaManager._cache_partial_tail_block",
        "self.block_pool._maybe_evict_cached_block(checkpoint_block)",
        "self.block_pool._remove_cached_block_hashes(checkpoint_block)",
        "in align mode a transient prefill checkpoint's cache entries are dropped with no "
        "BlockRemoved event: a KV-event consumer still routes to them")),
    # Which blocks are cached beside a Mamba "align" group (`fuzz/kvmanager/align_caching.py`):
    # full attention's prompt tail keyed at the prompt's end, as EAGLE's is, not below its last
    # token. Every hit, count and event stays consistent with the pool's map: only a prediction
    # of the map's entries sees it.
    "mamba_align_prompt_tail_as_eagle": (SINGLE, Mutation(
        "FullAttentionManager._cache_partial_tail_block",
        "else request.num_prompt_tokens - 1", "else request.num_prompt_tokens",
        "hashed per fewer tokens than a block, full attention keys the prompt's last partial "
        "hash boundary at the prompt's end (EAGLE's limit) without EAGLE: a resend's hit, "
        "capped below its last token, can never use it")),
    # ... and a settle's (`align_caching_settle.py`): the scheduler's `cache_blocks` after an
    # output one token long (the public `cache_blocks` alone, which `allocate_slots` does not
    # call), as a scheduler that left the token in flight in its count (`num_computed_tokens`
    # where vLLM passes `num_computed_tokens - num_in_flight_tokens`): the block that token
    # completes is cached before its KV is written. Every hit, count and event stays consistent
    # with the pool's map.
    "mamba_align_settle_one_token_long": (MANAGER, Mutation(
        "KVCacheManager.cache_blocks",
        "self.coordinator.cache_blocks(request, num_computed_tokens)",
        "self.coordinator.cache_blocks(request, num_computed_tokens + 1)",
        "the scheduler's cache_blocks after an output caches one token more than it was asked "
        "(the token in flight's position, its KV not written yet)")),
    # EAGLE's drop beside the group with a KV connector (`align_external_eagle.py`, since
    # 2026-12-07): the connector's per-group lookup (`find_longest_cache_hit_per_group`) with
    # full attention looked a unit past the cap but never dropping, or the Mamba group given
    # the margin too (its finder never drops: its own hit can reach the prompt's last token)
    "mamba_connector_eagle_drop_skipped": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit_per_group",
        "drop_eagle_block=use_eagle,", "drop_eagle_block=False,",
        "with EAGLE and a KV connector the connector's lookup gives full attention the margin "
        "but not the drop: a local hit a hash unit deeper than the admission's")),
    "mamba_connector_eagle_margin_to_mamba": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit_per_group",
        "if use_eagle and not isinstance(spec, MambaSpec):", "if use_eagle:",
        "with EAGLE and a KV connector the connector's lookup looks the Mamba group a unit past "
        "the cap, which it never drops: a state at the prompt's last token taken as deeper")),
    # ... and the margin's top under the caller's cap (the "capped mamba" profile, since
    # 2026-12-07; `kvfuzz mutate`'s survivor of line 969, `+` as `<<`): `min(cap + margin,
    # hashed tokens)` reads the sum only where a cap below the hashed tokens passes it
    "mamba_connector_eagle_margin_shifted": (COORDINATOR, Mutation(
        "HybridKVCacheCoordinator.find_longest_cache_hit_per_group",
        "max_cache_hit_length + eagle_margin,", "max_cache_hit_length << eagle_margin,",
        "with EAGLE, a KV connector and the caller's cap the connector's lookup looks full "
        "attention cap << margin tokens deep: its hit past the cap, flagged diverged")),
    # ... and multi-module MTP's held-back tokens with the connector (`align_external_mtp.py`,
    # since 2026-12-07): a load reported done caching its loaded tokens as finalized (the
    # prefiller's KV), k - 1 past what a step's caching takes (the manager's `cache_blocks`,
    # so a settle after an output too: "mamba align" reaches it there, index 182 first)
    "mamba_connector_mtp_load_finalized": (MANAGER, Mutation(
        "KVCacheManager.cache_blocks",
        "self.coordinator.cache_blocks(request, num_computed_tokens)",
        "self.coordinator.cache_blocks(\n"
        "                request, num_computed_tokens + self.coordinator.num_reprefillable_tokens)",
        "with multi-module MTP the manager's cache_blocks (a load reported done, a settle) "
        "caches MTP's k - 1 re-prefillable tokens too, where a step holds them back")),
    # Hits reported beside the group (`fuzz/kvmanager/align_reported.py`): a hit inside the
    # prompt's last block, which the request has no whole hash of, reported without that block
    # (the release reads past the request's hashes there and raises: the reduced mode holds it
    # to that). Only a Mamba "align" group's partial hits reach it.
    "mamba_align_report_clamped": (POOL, Mutation(
        "BlockPool.emit_cached_block_events",
        "for i in range(num_cached_blocks):",
        "for i in range(min(num_cached_blocks, len(block_hashes))):",
        "a hit reported announces only the blocks the request has whole hashes of: a hit "
        "inside the prompt's last block is reported one block short, where the release "
        "raises")),
    "pool_reuse_keeps_hash": (POOL, Mutation(
        "BlockPool.get_new_blocks", "self._maybe_evict_cached_block(block)\n", "pass\n",
        "the manager's pool hands out a cached block and keeps its cache entry")),
}
