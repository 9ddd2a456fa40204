"""What an earlier vLLM release's manager cannot be asked: a setting its constructors or its
`allocate_slots` do not take (read from the class: `impl/kvmanager/released_api.py`). A
trace that sets one is outside that class's contract, never run. Standard library and the
connector's op types only."""

from __future__ import annotations

from kvfuzz.strategies.kvmanager.connector_ops import Connect, Cut, Loaded

NO_RETENTION = "no prefix_cache_retention_interval (an earlier vLLM's KVCacheConfig)"
NO_IN_FLIGHT = "no max_in_flight_tokens (an earlier vLLM release)"
NO_WATERMARK = "no watermark (an earlier vLLM release)"
NO_WHOLE_CHECK = "no full_sequence_must_fit in allocate_slots (an earlier vLLM release)"
NO_SCHEDULER_BLOCK = "no scheduler_block_size (an earlier vLLM release)"
NO_CONNECTOR = ("no KV-connector calls of vLLM 0.33 (get_computed_blocks_for_connector, "
                "reserved_blocks, record_blocks_for_zeroing: an earlier vLLM release)")
# Speculative decoding's settings of vLLM 0.33 (the "lookahead hashes", "mtp" and "eagle
# groups" profiles)
NO_HASH_LOOKAHEAD = "no num_hash_lookahead_tokens (an earlier vLLM release)"
NO_PREFILL_LOOKAHEAD = "no num_prefill_lookahead (an earlier vLLM release)"
NO_SHARED_PREFIX = ("no enable_mamba_shared_prefix_checkpoint (an earlier vLLM release's "
                    "KVCacheManager)")
NO_EAGLE_GROUPS = "no KVCacheGroupSpec.is_eagle_group (an earlier vLLM release)"
NO_MAMBA_CHECKPOINT = ("no MambaSpec.num_prefill_checkpoint_blocks with "
                       "prefill_checkpoint_alignment (vLLM before 0.30)")
NO_MAMBA_SPECULATIVE = "no MambaSpec.num_speculative_blocks (an earlier vLLM release)"
# The attention specs' fields (read from their constructors: `CONSTRUCTOR_FIELDS`)
NO_RETAINED = "no SlidingWindowSpec.extra_retained_tokens (vLLM before 0.28)"
NO_LOCAL_CHUNK = "no ChunkedLocalAttentionSpec(attention_chunk_size) (an earlier vLLM release)"
NO_MAMBA_MODE = "no MambaSpec.mamba_cache_mode (an earlier vLLM release)"
NO_CROSS = "no CrossAttentionSpec (an earlier vLLM release)"
NO_HISPARSE = ("no HiSparse host pool (KVCacheConfig.hisparse_host_num_blocks: an earlier vLLM "
               "release)")
# The block pool of vLLM before 0.24 keys a block of several hash units by the units' hashes
# joined (`BlockHashListWithBlockSize`; 0.24 on, by the last unit's hash, as kvfuzz models):
# read from the pool's module (`fuzz/blockpool/target.joins_units`).
NO_UNIT_KEYS = ("keys a block of several hash units by their hashes joined (vLLM before "
                "0.24): no hash block below a group's block size")
# The scheduler's reads a class may not have: each is then left out of the judge's checks (no
# trace needs them; `unread`), never a crash of every trace.
NO_ESTIMATE = "no estimate_cached_tokens (vLLM 0.25): not read"
NO_TRUNCATE = "no truncate_computed_blocks (vLLM before 0.27): not read"
NO_COPIES = "no take_kv_cache_block_copies (vLLM 0.25): not read"
NO_COMPUTED_IDS = "no get_block_ids_for_computed_tokens (vLLM 0.20): not read"
NO_RECORD = ("no record_prefix_cache_stats (vLLM before 0.27): admissions are not recorded and "
             "the prefix-cache stats not compared")
# vLLM before 0.30 counts the blocks every running request shares (cascade attention);
# kvfuzz models 0.33's deprecated stub (all zeros), not that count: the read is left out.
COUNTS_COMMON_PREFIX = ("get_num_common_prefix_blocks counts the shared prefix (vLLM before "
                        "0.30, cascade attention): not read, kvfuzz models 0.33's zeros")
NO_BOUNDARY = ("get_computed_blocks returns no shared-prefix boundary (vLLM 0.25): the "
               "boundary is not compared")
UNREAD = (NO_ESTIMATE, NO_TRUNCATE, NO_COPIES, NO_RECORD, COUNTS_COMMON_PREFIX, NO_BOUNDARY,
          NO_COMPUTED_IDS)
# A contract of the release, followed by the model: allocate_slots of no new tokens adopts a hit
# alone from vLLM 0.30 (0.33's ValueError names "computed tokens to adopt"); before, it raises
# unless external tokens arrive, as for no hit at all.
NO_HIT_ALONE = ("allocate_slots of a hit alone is refused (vLLM before 0.30: a ValueError "
                "without new or external tokens)")
# `released_api`'s keys -> the precondition a class that lacks it declares
LACKS = {"retention": NO_RETENTION, "in_flight": NO_IN_FLIGHT, "watermark": NO_WATERMARK,
         "whole": NO_WHOLE_CHECK, "scheduler": NO_SCHEDULER_BLOCK, "estimate": NO_ESTIMATE,
         "truncate": NO_TRUNCATE, "copies": NO_COPIES, "record": NO_RECORD,
         "zero_common_prefix": COUNTS_COMMON_PREFIX, "boundary": NO_BOUNDARY,
         "hit_alone": NO_HIT_ALONE, "computed_ids": NO_COMPUTED_IDS,
         "connector": NO_CONNECTOR, "hash_lookahead": NO_HASH_LOOKAHEAD,
         "prefill_lookahead": NO_PREFILL_LOOKAHEAD, "eagle_groups": NO_EAGLE_GROUPS,
         "shared_prefix": NO_SHARED_PREFIX,
         "mamba_checkpoint": NO_MAMBA_CHECKPOINT, "mamba_speculative": NO_MAMBA_SPECULATIVE,
         "retained": NO_RETAINED, "local_chunk": NO_LOCAL_CHUNK, "mamba_mode": NO_MAMBA_MODE,
         "cross": NO_CROSS, "hisparse": NO_HISPARSE}


def unread(preconditions) -> frozenset:
    """The reads a class with `preconditions` is not asked (`UNREAD`), the contract it keeps
    instead of 0.33's (`NO_HIT_ALONE`), and whether it has the connector's lookup
    (`NO_CONNECTOR`: Mamba "align"'s reduced mode asks it at every admission, where it is)."""
    return frozenset(text for text in UNREAD + (NO_HIT_ALONE, NO_CONNECTOR)
                     if text in preconditions)


def broken(trace, preconditions) -> list[str]:
    """The settings `trace` asks for that a class with `preconditions` cannot take."""
    asks = {NO_RETENTION: trace.retention is not None,
            NO_IN_FLIGHT: trace.max_in_flight_tokens is not None,
            NO_WATERMARK: bool(trace.watermark),
            NO_WHOLE_CHECK: trace.full_sequence_must_fit,
            # groups of different block sizes: a scheduler block above the block size
            NO_SCHEDULER_BLOCK: trace.scheduler_block_size != trace.block_size,
            # the connector's ops (strategies/kvmanager/connector_ops.py)
            NO_CONNECTOR: any(isinstance(op, (Connect, Loaded, Cut)) for op in trace.ops),
            NO_HASH_LOOKAHEAD: trace.hash_lookahead > 0,
            NO_PREFILL_LOOKAHEAD: trace.prefill_lookahead > 0,
            NO_EAGLE_GROUPS: bool(trace.eagle_groups),
            NO_SHARED_PREFIX: trace.mamba_shared_prefix,
            NO_MAMBA_CHECKPOINT: trace.mamba_checkpoint > 0,
            NO_MAMBA_SPECULATIVE: trace.mamba_speculative > 0,
            NO_RETAINED: trace.retained > 0,
            NO_LOCAL_CHUNK: trace.local_chunk > 0,
            NO_MAMBA_MODE: bool(trace.mamba_mode),
            NO_CROSS: trace.encoder_tokens > 0,
            NO_HISPARSE: trace.hisparse > 0,
            NO_UNIT_KEYS: max(trace.block_size, trace.window_block_size) > trace.hash_size}
    return [f"a trace with a setting the class does not take: {lacking}"
            for lacking, asked in asks.items() if asked and lacking in preconditions]
