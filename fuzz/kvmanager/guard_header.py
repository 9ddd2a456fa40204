"""The kvmanager trace's header read from a live vLLM `KVCacheManager` (`guard.py`): its
settings, and the configurations the trace does not model refused (`GuardUnsupported`) before
the guard is made."""

from __future__ import annotations

from kvfuzz.fuzz.engine.guard import GuardUnsupported
from kvfuzz.fuzz.kvmanager.guard_mamba import is_align_group, mamba_settings
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager.trace import Trace, to_json


def header(manager, max_in_flight_tokens: int | None = None, lookahead: int = 0,
           async_scheduling: bool = False, steps_in_flight: int = 1) -> Trace:
    """The trace's settings, read from the live manager (`max_in_flight_tokens` is not kept on
    it: the engine passes what it gave the constructor; None is the manager's default; nor is
    `lookahead`, the draft tokens' slots the scheduler asks on every allocation, nor whether
    the scheduler is asynchronous, nor how many steps of a request a pipeline has in flight)."""
    def refuse(why: str):
        raise GuardUnsupported(f"kvfuzz.guard(kvmanager): {why}")

    pool = manager.block_pool
    config = manager.kv_cache_config
    specs = [group.kv_cache_spec for group in config.kv_cache_groups]
    kinds = [type(spec).__name__ for spec in specs]
    # (a Mamba "align" group beside full attention: guard_mamba.py)
    mamba = mamba_settings(specs, refuse) if is_align_group(kinds, specs) else {}
    if not mamba and kinds not in (["FullAttentionSpec"],
                                   ["FullAttentionSpec", "SlidingWindowSpec"]):
        refuse(f"KV-cache groups {kinds}: the trace models one full-attention group and at most "
               f"one sliding-window group or one Mamba group in mode \"align\"")
    block_size = specs[0].block_size
    if any(spec.block_size != block_size for spec in specs):
        refuse(f"groups of block sizes {[spec.block_size for spec in specs]}: the trace has one")
    window = specs[1].sliding_window if len(specs) > 1 and not mamba else 0
    if window and getattr(specs[1], "extra_retained_tokens", 0):
        refuse("a sliding window with extra retained tokens is not modelled")
    # decode/prefill context parallelism: each rank holds a share of a manager's block (the
    # single-type managers' block is the spec's times the ranks); the live header has no `dcp`
    ranks = {(getattr(m, "dcp_world_size", 1), getattr(m, "pcp_world_size", 1))
             for m in manager.coordinator.single_type_managers}
    if ranks != {(1, 1)}:
        refuse(f"context parallelism (dcp, pcp world sizes {sorted(ranks)}) is not modelled "
               f"by the guard (kvfuzz's own traces: the 'dcp' profile)")
    hash_block_size = getattr(manager.coordinator, "hash_block_size", block_size)
    # (partial hits beside a Mamba "align" group: the trace's `hash_block_size`, guard_mamba.py)
    if hash_block_size != block_size and not mamba:
        refuse(f"hash block size {hash_block_size} below the block size {block_size}")
    if not manager.enable_caching:
        refuse("the trace models prefix caching on")
    blocks = int(pool.num_gpu_blocks)
    held = [m for m in manager.coordinator.single_type_managers
            if getattr(m, "req_to_blocks", None)]
    if pool.get_num_free_blocks() != blocks - 1 or held:
        refuse("the manager has been used: guard it before its first call (the oracle starts "
               "from an empty pool)")
    # vLLM records new attention blocks for zeroing where the cache mixes precisions (or holds
    # Mamba layers: not modelled, the records go through unchecked, guard_mamba.py): in the
    # trace, the window group in another precision
    zeroing = bool(getattr(config, "needs_kv_cache_zeroing", False)) and not mamba
    if zeroing and not window:
        refuse("zeroing with one group: the trace's zeroing is its second group's precision")
    watermark_blocks = int(getattr(manager, "watermark_blocks", 0))
    trace = Trace(blocks, block_size, window, int(manager.max_model_len), (),
                  retention=getattr(config, "prefix_cache_retention_interval", None),
                  max_in_flight_tokens=max_in_flight_tokens, zeroing=zeroing,
                  lookahead=lookahead, async_scheduling=async_scheduling,
                  steps_in_flight=steps_in_flight,
                  hash_block_size=hash_block_size if hash_block_size != block_size else 0,
                  **speculation(manager), **mamba,
                  # the fraction whose int(fraction * blocks) the manager computed
                  watermark=(watermark_blocks + 0.5) / blocks if watermark_blocks else 0.0)
    from kvfuzz.strategies.kvmanager.codec import from_json

    try:
        from_json(to_json(trace), "the live manager")
    except FormatError as error:
        refuse(f"its settings are outside what a kvmanager trace holds ({error})")
    return trace


def speculation(manager) -> dict:
    """Speculative decoding's settings as the manager holds them: `use_eagle` (EAGLE's
    last-block drop), the pool's lookahead hashing, the coordinator's re-prefillable tokens
    (multi-token prediction's prefill lookahead k holds k - 1 back) and the groups flagged
    `is_eagle_group` (0.33.0's names; an earlier release without them reads as none)."""
    coordinator = manager.coordinator
    reprefillable = int(getattr(coordinator, "num_reprefillable_tokens", 0))
    groups = manager.kv_cache_config.kv_cache_groups
    return {"eagle": bool(getattr(manager, "use_eagle", False)),
            "hash_lookahead": int(getattr(manager.block_pool, "num_hash_lookahead_tokens", 0)),
            # k = 1 (EAGLE's) holds nothing back: the trace's 0 and 1 are the same manager
            "prefill_lookahead": reprefillable + 1 if reprefillable else 0,
            "eagle_groups": tuple(index for index, group in enumerate(groups)
                                  if getattr(group, "is_eagle_group", False)),
            # Mamba's shared-prefix checkpoint as the manager narrowed it (0.33.0's name)
            "mamba_shared_prefix": bool(getattr(manager, "mamba_shared_prefix_checkpoint",
                                                False))}
