"""Broken variants of the released vLLM `BlockPool` (vllm 0.33.0): the installed module's source
with ONE edit inside one method each (`impl/source_mutation.py`), built on first use. Each breaks
a promise the KV-cache manager relies on, not a line picked at random. They need vllm installed;
the tests that run them skip without it."""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation, mutant_classes

MODULE, CLASS, MAP = "vllm.v1.core.block_pool", "BlockPool", "BlockHashToBlockMap"

MUTATIONS = {
    "freed_uncached_reused_last": Mutation(
        f"{CLASS}.free_blocks", "self.free_block_queue.prepend_n(blocks_to_evict_first)",
        "self.free_block_queue.append_n(blocks_to_evict_first)",
        "freed blocks with no hash go to the tail of the free queue, not the head"),
    "freed_cached_reused_first": Mutation(
        f"{CLASS}.free_blocks", "blocks_to_evict_last.append(block)",
        "blocks_to_evict_first.append(block)",
        "freed cached blocks go to the head of the free queue: the cache is evicted first"),
    "reuse_keeps_hash": Mutation(
        f"{CLASS}.get_new_blocks", "self._maybe_evict_cached_block(block)\n", "pass\n",
        "a cached block handed out again keeps its cache entry (a hit finds overwritten KV)"),
    "touch_leaves_on_queue": Mutation(
        f"{CLASS}.touch", "self.free_block_queue.remove(block)", "pass",
        "a prefix hit on a free cached block leaves it on the free queue"),
    "touch_counts_twice": Mutation(
        f"{CLASS}.touch", "block.ref_cnt += 1", "block.ref_cnt += 1 + (block.ref_cnt > 0)",
        "a block touched while held gets two references"),
    "exact_fit_refused": Mutation(
        f"{CLASS}.get_new_blocks", "if num_blocks > self.get_num_free_blocks():",
        "if num_blocks >= self.get_num_free_blocks():",
        "asking for exactly the free blocks raises ValueError"),
    "null_block_cached": Mutation(
        f"{CLASS}.cache_full_blocks", "if blk.is_null or (", "if (",
        "cache_full_blocks hashes the null block of a sliding-window table"),
    "lookup_newest_duplicate": Mutation(
        f"{MAP}.get_one_block", "return next(iter(blocks.values()))",
        "return list(blocks.values())[-1]",
        "of several blocks cached under one hash, a lookup returns the newest, not the first"),
    "pop_drops_last_duplicate": Mutation(
        f"{MAP}.pop", "if len(blocks) > 0:", "if len(blocks) > 1:",
        "evicting one of two blocks cached under one hash drops the other from the map"),
    "reset_while_held": Mutation(
        f"{CLASS}.reset_prefix_cache", "if num_used_blocks != 1:",
        "if num_used_blocks > self.num_gpu_blocks:",
        "reset_prefix_cache clears the cache while blocks are still held"),
    "unpinned_reused_first": Mutation(
        f"{CLASS}.unpin_blocks", "self.free_block_queue.append_n(released)",
        "self.free_block_queue.prepend_n(released)",
        "unpinned blocks go to the head of the free queue: reused before anything else"),
    "free_dedups": Mutation(
        f"{CLASS}.free_blocks", "for block in ordered_blocks:",
        "for block in {id(b): b for b in ordered_blocks}.values():",
        "free_blocks releases one reference per distinct block (a de-duplication fix for a "
        "double free, #42571): a block named twice with two references keeps one"),
    # KV events, partial entries, copies, usage (the configurations of docs/upstream-vllm.md)
    "stored_parent_is_itself": Mutation(
        f"{CLASS}.cache_full_blocks", "block_hashes[num_cached_blocks - 1]",
        "block_hashes[num_cached_blocks]",
        "a KV event names the first new block's own hash as its parent: a consumer's chain "
        "breaks"),
    "reuse_not_published": Mutation(
        f"{CLASS}._maybe_evict_cached_block", "self._emit_block_removed_events(evicted_hashes)",
        "pass",
        "a cached block evicted (handed out again, or by evict_blocks) publishes no removal: a "
        "router keeps sending requests to a prefix that is gone"),
    "reset_not_published": Mutation(
        f"{CLASS}.reset_prefix_cache", "self.kv_event_queue.append(AllBlocksCleared())", "pass",
        "reset_prefix_cache publishes no AllBlocksCleared: consumers keep the whole old cache"),
    "partial_entry_one_unit_long": Mutation(
        f"{CLASS}._get_partial_block_hash", "return request.block_hashes[num_hash_blocks - 1]",
        "return request.block_hashes[num_hash_blocks]",
        "a partial entry is keyed one hash unit past the prefix its block holds: a hit reads "
        "tokens that were never written"),
    "copy_forgets_token_count": Mutation(
        f"{CLASS}.move_block_hashes", "num_tokens = src_block.block_hash_num_tokens",
        "num_tokens = None",
        "a copy-on-write block takes the entries but not the number of tokens they cover"),
    "usage_counts_null_block": Mutation(
        f"{CLASS}.get_usage", "total_gpu_blocks = self.num_gpu_blocks - 1",
        "total_gpu_blocks = self.num_gpu_blocks",
        "get_usage counts the null block as usable: a full pool reads below 100%"),
    "lookahead_one_short": Mutation(
        f"{CLASS}._lookahead_token_ids", "block_end : block_end + self.num_hash_lookahead_tokens",
        "block_end : block_end + self.num_hash_lookahead_tokens - 1",
        "a KV event carries one lookahead token fewer than its block's hash covers"),
    "evict_spares_held": Mutation(
        f"{CLASS}.evict_blocks", "self._maybe_evict_cached_block(block)",
        "block.ref_cnt or self._maybe_evict_cached_block(block)",
        "evict_blocks leaves the cache entries of blocks still held"),
}


__getattr__ = mutant_classes(MODULE, CLASS, MUTATIONS, "vllm_block_pool")
