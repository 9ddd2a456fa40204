"""A Mamba "align" group under vLLM's own scheduler, guarded: the group the seeded sessions'
engine builds (`Workload(mamba="align")`, `vllm_scheduler.build_scheduler`), and what the
guard's header reads of it (`guard_header.header`), the trace's settings as the generator's
"mamba align" traces have them (`strategies/kvmanager/hybrid.build_mamba_align`).

How vLLM's engine builds such a model (0.33.0): with prefix caching on, the cache config's
`mamba_cache_mode` "align" and `mamba_block_size` the cache's block size
(`model_executor/models/config.py:763-779`, a hybrid model's config update: set here
directly, the CPU sessions' model being a plain decoder); each Mamba layer's `MambaSpec` of
that mode in a group of its own, so of the attention group's block size, which
`resolve_kv_cache_block_sizes` then hashes per block (no `prefix_match_unit`: no partial hits,
no copy-on-write; with one, `Workload.hash_block_size`, `CopyRetentions` below); `KVCacheConfig.needs_kv_cache_zeroing` is then true (Mamba state is read before
it is written: every new block of any group is recorded for zeroing), which the trace's
`zeroing` (a second attention group's precision) does not model: the guard lets the
scheduler's `take_new_block_ids` through unchecked. No vLLM at import.
"""

from __future__ import annotations

# The trace's Mamba fields a live header may set (codec.py: mamba_mode, mamba_checkpoint)
ALIGN = "align"


def cache_settings(workload) -> dict:
    """The cache config's Mamba keywords for `workload` (none without a Mamba group), and its
    `prefix_match_unit` where it hashes per fewer tokens than a block."""
    unit = {"prefix_match_unit": workload.hash_block_size} if workload.hash_block_size else {}
    shared = {"enable_mamba_shared_prefix_checkpoint": True} \
        if getattr(workload, "mamba_shared_prefix", False) else {}
    return ({"mamba_cache_mode": workload.mamba} if workload.mamba else {}) | unit | shared


def hashing(config, kv_config) -> dict:
    """The scheduler's `hash_block_size` keyword where the cache config sets a
    `prefix_match_unit` (else none: the block size), resolved as vLLM's engine core resolves
    it (`v1/engine/core.py:356-369`: `resolve_kv_cache_block_sizes`, and the cache-hit
    alignment set on the KV-cache config)."""
    if not config.cache_config.prefix_match_unit:
        return {}
    from vllm.v1.core.kv_cache_utils import (resolve_cache_hit_alignment_tokens,
                                             resolve_kv_cache_block_sizes)

    scheduler_size, hash_size = resolve_kv_cache_block_sizes(kv_config, config)
    kv_config.hash_block_size = hash_size
    kv_config.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
        kv_config, config, scheduler_size, hash_size)
    return {"hash_block_size": hash_size}


def mamba_group(workload, torch):
    """The Mamba group's `KVCacheGroupSpec` of `workload` (its state a float16 tensor of 4, as
    kvfuzz's driver builds it: `impl/kvmanager/driver.py`), or None."""
    if not workload.mamba:
        return None
    from vllm.v1.kv_cache_interface import KVCacheGroupSpec, MambaSpec

    more = {"num_prefill_checkpoint_blocks": workload.mamba_checkpoint_blocks,
            "prefill_checkpoint_alignment": workload.mamba_checkpoint} \
        if workload.mamba_checkpoint else {}
    # speculative decoding's scratch state blocks: vLLM's Mamba layers set
    # `num_speculative_blocks` to the engine's `num_speculative_tokens` (ReplaySSM off:
    # model_executor/layers/mamba/abstract.py:72-90)
    if workload.speculative:
        more["num_speculative_blocks"] = workload.num_speculative
    return KVCacheGroupSpec(["mamba0"], MambaSpec(
        block_size=workload.block_size, shapes=((4,),), dtypes=(torch.float16,),
        mamba_cache_mode=workload.mamba, **more))


def is_align_group(kinds: list[str], specs) -> bool:
    """Whether the manager's groups are full attention and one Mamba group in mode "align"."""
    return kinds == ["FullAttentionSpec", "MambaSpec"] and \
        getattr(specs[1], "mamba_cache_mode", None) == ALIGN


def mamba_settings(specs, refuse) -> dict:
    """The trace's Mamba fields of a full-attention and Mamba "align" manager (`specs`), or
    `refuse(why)` for what the trace does not model."""
    spec = specs[1]
    # (any positive count of prefill checkpoint blocks is the trace's one: vLLM 0.33.0 reads
    # the count only as "> 0", MambaManager.__init__ (single_type_kv_cache_manager.py:1446-1449)
    # and the scheduler (sched/scheduler.py:445-448); only the worker's memory estimate,
    # `MambaSpec.max_memory_usage_bytes`, counts them, and the trace's pool is given)
    checkpoints = int(getattr(spec, "num_prefill_checkpoint_blocks", 0))
    # (the trace's `mamba_speculative`: the scratch blocks past the last computed state, which
    # the scheduler's draft steps fill: guard_sync_drafts.py)
    speculative = int(getattr(spec, "num_speculative_blocks", 0))
    if getattr(spec, "tokens_per_state", -1) not in (-1, None):
        refuse(f"a Mamba state of {spec.tokens_per_state} tokens is not modelled")
    alignment = getattr(spec, "prefill_checkpoint_alignment", None) if checkpoints else 0
    return {"mamba_mode": ALIGN, "mamba_checkpoint": int(alignment or 0),
            "mamba_speculative": speculative}


class SameStepDeferral:
    """Mixed into `GuardedManager` (`guard.py`): a Mamba "align" group's admission deferred to
    the next step, which kvfuzz's trace never holds (its every op is a step).

    vLLM's `MambaManager.get_num_blocks_to_allocate` (single_type_kv_cache_manager.py:1704-1712)
    answers `num_gpu_blocks + 1` ("not enough blocks: put it in the next step") where the hit's
    state block was cached *in the current step* (`cached_blocks_this_step`, cleared by the
    scheduler's `new_step_starts` as each `schedule()` begins): a state another request's
    chunk of this step computes is not there yet. So `allocate_slots` of such an admission
    returns None with nothing changed (the request holds no block), and the scheduler tries it
    again at a later step, with a new lookup. The guard makes that call as no op of the trace
    (its lookup was checked when made): the trace goes on to the admission that follows, which
    a replay, where every op is a step, makes as the engine made it. The deferral itself is the
    manager's own rule read from its own set, so it is not judged here; a manager that
    allocated all the same is refused (the trace then holds no op for what it did)."""

    def _same_step_deferral(self, tracked, given, perform):
        """The engine's admission call made as no op where vLLM's Mamba group defers it (else
        None: the caller maps the call)."""
        if tracked.running or not self._deferred_by_step(given.get("new_computed_blocks")):
            return None
        vars(self)["_kvfuzz_made"] = True
        result = perform()
        if result is not None:
            self._refuse(f"allocate_slots admitted request {tracked.rid} on a Mamba state "
                         f"cached in this step, which vLLM defers to the next step "
                         f"(MambaManager.get_num_blocks_to_allocate)")
        vars(self)["kvfuzz_deferrals"] = vars(self).get("kvfuzz_deferrals", 0) + 1
        return True

    def _deferred_by_step(self, hit_blocks) -> bool:
        """vLLM's condition: a group whose manager keeps `cached_blocks_this_step` and the
        last block of the hit in that group is among them."""
        if hit_blocks is None:
            return False
        managers = self._kvfuzz_object.coordinator.single_type_managers
        for blocks, manager in zip(hit_blocks.blocks, managers):
            this_step = getattr(manager, "cached_blocks_this_step", None)
            if this_step and len(blocks) and blocks[-1].block_hash in this_step:
                return True
        return False


class CopyRetentions:
    """Mixed into `GuardedManager` (`guard.py`): a partial hit's copy-on-write under vLLM's
    synchronous scheduler (a hash block below the block size: `Workload.hash_block_size`).

    `allocate_slots` of an admission with a partial hit queues a copy of the hit's state into
    a block of its own (`MambaManager._apply_cow`; a running request's re-keyed tail:
    `move_block_hashes`), its two endpoints a reference more each until the copy ran. The
    scheduler takes the step's copies after its allocations (`take_kv_cache_block_copies`,
    scheduler.py:1698) and frees the endpoints through `block_pool.free_blocks`
    (`_free_cow_retained_blocks`, at once without deferred frees). Kvfuzz's trace has no op for
    that free: its lock step takes and frees the copies after every op (`release_copies`), so a
    replay frees them at the op that made them, the engine at its step's end (the reduced
    mode's pool check counts them held until then: `copies_retained`). The free of exactly
    the blocks the last take returned goes through as no op; any other is the deferred
    frees' (`guard_deferred.py`) or refused."""

    def take_kv_cache_block_copies(self):
        copies, retained = self._kvfuzz_object.take_kv_cache_block_copies()
        vars(self)["_kvfuzz_retained"] = list(retained)
        return copies, retained

    def _retention_freed(self, blocks) -> bool:
        """Whether `blocks` are the endpoints the scheduler's last take of the copies returned
        (then forgotten here), freed without deferral. The lock step's reference counts (its
        last state read, which counted them held) lose those references too: the next op's
        exact count reads its free blocks from them, and no state is read between (a stale
        count expected a decode refused that the engine, with the endpoints free, made)."""
        held = vars(self).get("_kvfuzz_retained")
        if not held or len(held) != len(blocks) or any(a is not b for a, b in zip(held, blocks)):
            return False
        vars(self)["_kvfuzz_retained"] = None
        counts = getattr(self.kvfuzz_session.lock, "ref", None)
        for block in blocks if counts is not None else ():
            if 0 < block.block_id < len(counts) and counts[block.block_id] > 0:
                counts[block.block_id] -= 1
        return True
