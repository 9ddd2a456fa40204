"""The catalogue of `upstream_mutants`, part 3: extra hash keys, lookahead hashing, EAGLE groups,
multi-token prediction, prompt embeddings and spec-decode padding; and the mutants kept outside
the catalogue (`ALONE_MUTATIONS`)."""

from __future__ import annotations

from kvfuzz.impl.kvmanager.mutant_catalogue import (COORDINATOR, HISPARSE, MANAGER, POOL, SINGLE,
                                                    UTILS)
from kvfuzz.impl.source_mutation import Mutation

HASHING = {
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
    # The admission counts beside HiSparse's groups and a Mamba "align" group (the "hisparse
    # cow" profile): a hit that ends inside a block takes a private copy of the hit's state.
    "mamba_partial_copy_capped": (SINGLE, Mutation(
        "MambaManager.get_num_blocks_to_allocate",
        "physical_block_cap = 1 + int(has_partial_hit) + checkpoint_block",
        "physical_block_cap = 1 + checkpoint_block",
        "a Mamba \"align\" admission whose hit ends inside a block counts its new state but "
        "not the copy of the hit's state: admitted with a block too few free")),
}
