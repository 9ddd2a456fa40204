"""Calls a KV-cache manager with vLLM `KVCacheManager`'s interface (vllm 0.33.0) in plain ints:
requests are vLLM `Request` objects kept here (their block hashes computed by vLLM's own request
block hasher over `strategies.kvmanager.hashing.block_hash`), results come out as block ids per
group, and the pool is read through `PoolReader` (the blockpool target's).

The configuration objects (`KVCacheConfig`, the attention specs, `Request`, `SamplingParams`) come
from the installed vLLM: the implementation under test is the manager class. An earlier release
is read, not assumed: a setting its constructors do not take is not passed (a trace that needs it
is outside that class's contract: `released_api`), and a lookup that returns no shared-prefix
boundary (before vLLM 0.26) reads as boundary 0."""

from __future__ import annotations

from kvfuzz.impl.blockpool.driver import plain_events
from kvfuzz.impl.driver_calls import taken
from kvfuzz.impl.kvmanager.connector_driving import ConnectorDriving
from kvfuzz.impl.kvmanager.hisparse import HiSparseCalls, HiSparseDriving, hisparse_groups
from kvfuzz.impl.kvmanager.reads import ManagerReads, StepReads, _ids, _in_trace_order
from kvfuzz.impl.kvmanager.released_api import asked
from kvfuzz.strategies.kvmanager.hashing import NONE_HASH, block_hash


class KVManagerDriver(ConnectorDriving, ManagerReads, StepReads, HiSparseDriving):
    def __init__(self, cls, blocks: int, block_size: int, window: int, max_model_len: int,
                 retention: int | None = None, max_in_flight_tokens: int | None = None,
                 watermark: float = 0.0, caching: bool = True, events: bool = False,
                 stats: bool = False, lookahead: int = 0, eagle: bool = False,
                 retained: int = 0, window_block_size: int = 0, hash_block_size: int = 0,
                 local_chunk: int = 0, mamba_mode: str = "", encoder_tokens: int = 0,
                 zeroing: bool = False, dcp: int = 0, hash_lookahead: int = 0,
                 eagle_groups=(), prefill_lookahead: int = 0, mamba_checkpoint: int = 0,
                 mamba_speculative: int = 0, hisparse: int = 0, lone: bool = False,
                 first_window: int = 0, full_last: bool = False,
                 mamba_shared_prefix: bool = False):
        import math

        import torch
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                                KVCacheGroupSpec, SlidingWindowSpec)
        from vllm.v1.request import Request, RequestStatus

        shape = dict(num_kv_heads=1, head_size=8, dtype=torch.float16)
        # Under DCP (`dcp` ranks) each rank holds block_size // dcp tokens of a block: the spec's
        # block size; the manager's blocks are block_size tokens (`dcp_world_size`).
        specs = [FullAttentionSpec(block_size=block_size // max(dcp, 1), **shape)]
        if zeroing:  # the second group in another precision: vLLM then zeroes new blocks
            shape = dict(shape, dtype=torch.bfloat16)
        if window:  # extra_retained_tokens only where set: a release before 0.28 has no such
            # field (`released_api`: such a trace is outside its contract, never run)
            specs.append(SlidingWindowSpec(block_size=window_block_size or block_size, **shape,
                                           sliding_window=window, **asked(
                                               SlidingWindowSpec, extra_retained_tokens=retained)))
        if local_chunk:
            from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec

            specs.append(ChunkedLocalAttentionSpec(block_size=block_size, **shape,
                                                   attention_chunk_size=local_chunk))
        if mamba_mode:
            from vllm.v1.kv_cache_interface import MambaSpec

            # one prefill checkpoint block, aligned to `mamba_checkpoint` tokens, and MTP's
            # speculative blocks (only where set: a release before them has no such fields)
            more = {"num_prefill_checkpoint_blocks": 1,
                    "prefill_checkpoint_alignment": mamba_checkpoint} if mamba_checkpoint else {}
            more |= {"num_speculative_blocks": mamba_speculative} if mamba_speculative else {}
            # (its own block size where given: with caching off vLLM's config makes it the
            # model's length, `MambaModelConfig.verify_and_update_config`)
            specs.append(MambaSpec(block_size=window_block_size or block_size, shapes=((4,),),
                                   dtypes=(torch.float16,), mamba_cache_mode=mamba_mode,
                                   **more))
        if encoder_tokens:
            from vllm.v1.kv_cache_interface import CrossAttentionSpec

            specs.append(CrossAttentionSpec(block_size=block_size, **shape))
        if first_window:  # group 0 a sliding window too (a model of two window sizes)
            specs[0] = SlidingWindowSpec(block_size=block_size, **shape,
                                         sliding_window=first_window, **asked(
                                             SlidingWindowSpec, extra_retained_tokens=retained))
        if lone:  # the window's group alone (every layer sliding window): the unitary coordinator
            specs = specs[1:]
        # Hashes per `hash_size` tokens; the scheduler's block, every group's block size's
        # least common multiple (as vLLM's engine config derives them for a hybrid model).
        hash_size = hash_block_size or block_size
        scheduler_size = math.lcm(block_size, *(spec.block_size for spec in specs[1:]))
        # a draft model's groups flagged `is_eagle_group` (only where the trace flags some: a
        # release before the flag has no such field)
        flags = [{"is_eagle_group": i in eagle_groups} if eagle_groups else {}
                 for i in range(len(specs))]
        groups = [KVCacheGroupSpec([f"layer{i}"], spec, **flag)
                  for i, (spec, flag) in enumerate(zip(specs, flags))]
        if hisparse:  # HiSparse's four groups and its host pool (`hisparse.py`), and a Mamba
            # "align" group after them where the trace has one ("hisparse cow")
            groups = hisparse_groups(block_size, shape) + groups[1:]
        # Full attention's group last, as vLLM groups a model whose first layer is Mamba or
        # cross attention (layers grouped in the order the model registers them); the manager's
        # answers per group are read back into the trace's order (full attention first)
        self.full_last = full_last
        if full_last:
            groups = groups[::-1]
        config = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=groups,
                               **asked(KVCacheConfig,
                                       prefix_cache_retention_interval=retention,
                                       hisparse_host_num_blocks=hisparse or None))
        init_none_hash(block_hash)
        _seed_none_hash()
        # (a mutant of vLLM's hashing utilities brings its own edited hasher factory)
        hasher_factory = getattr(cls, "request_block_hasher", None) or get_request_block_hasher
        # lookahead hashing: the hasher and the manager (its pool's events) told alike, and
        # only where set (a release before it has neither keyword)
        self._hasher = hasher_factory(hash_size, block_hash,
                                      **({"num_hash_lookahead_tokens": hash_lookahead}
                                         if hash_lookahead else {}))
        self._request_cls, self._params, self._status = Request, SamplingParams, RequestStatus
        self._hash_size = hash_size
        # streaming input under lookahead hashing: the requests that stopped resumable, whose
        # hashes the scheduler clears and recomputes at their next lookup (`_rehash`)
        self._hash_lookahead, self._streamed = hash_lookahead, set()
        # a setting is passed where the class takes it, or where the trace sets it (asked)
        self.manager = cls(config, max_model_len=max_model_len, hash_block_size=hash_size,
                           enable_caching=caching,
                           # (a class without the keyword fails a trace that needs it)
                           **(taken if scheduler_size == block_size else asked)(
                               cls, scheduler_block_size=scheduler_size),
                           **asked(cls, max_in_flight_tokens=max_in_flight_tokens,
                                   watermark=watermark, enable_kv_cache_events=events,
                                   log_stats=stats, use_eagle=eagle),
                           **(asked(cls, dcp_world_size=dcp) if dcp > 1 else {}),
                           **(asked(cls, num_hash_lookahead_tokens=hash_lookahead)
                              if hash_lookahead else {}),
                           **(asked(cls, num_prefill_lookahead=prefill_lookahead)
                              if prefill_lookahead else {}),
                           # Mamba's shared-prefix checkpoint (vLLM 0.33: only where set)
                           **(asked(cls, enable_mamba_shared_prefix_checkpoint=True)
                              if mamba_shared_prefix else {}))
        super().__init__(self.manager.block_pool, blocks)
        # HiSparse's coordinator, bound before the first request as the engine binds it, and
        # its host pool's reads
        self.hisparse = HiSparseCalls(self.manager, hisparse) if hisparse else None
        self.lookahead, self.encoder_tokens = lookahead, encoder_tokens
        self.requests: dict[int, object] = {}
        self.hits: dict[int, object] = {}  # rid -> the KVCacheBlocks of its last lookup (kept:
        # truncate_computed_blocks reads it after the admission)
        self.deferred: list[tuple[int, list]] = []  # (rid, blocks popped) until released

    def arrive(self, rid: int, tokens, no_cache_read: bool = False,
               report: bool = False, lora: str = "", lora_path: str = "", salt: str = "",
               images=(), embeds: bool = False) -> None:
        """A new request; `no_cache_read`: it skips reading the prefix cache (as prompt
        logprobs make it); `report`: it asks its hits reported (kv_cache_report_mode); `lora`
        (its adapter's name, loaded from `lora_path`), `salt` (its cache salt) and `images`
        ((identifier, offset, length) of each multimodal input): what the engine puts on the
        request and vLLM's block hasher folds into its hashes, passed only where set."""
        # a prompt of embeddings (`embeds`): no token ids, each position's embedding one
        # float32 value (the trace's token)
        prompt = {"prompt_token_ids": None, "prompt_embeds": _embeddings(tokens)} if embeds \
            else {"prompt_token_ids": list(tokens)}
        request = self._request_cls(
            str(rid), **prompt,
            sampling_params=self._params(max_tokens=1 << 20), pooling_params=None,
            block_hasher=self._hasher, **self._extra_keys(lora, lora_path, salt, images))
        if no_cache_read:
            request.skip_reading_prefix_cache = True
        if report:
            # a string made at run time, as a request's `extra_args` parsed from an API call
            # gives it: a literal here would be the interned constant the manager compares
            # with, and a manager testing identity (`is "full"`) would pass for nothing
            request.kv_cache_report_mode = "".join(("fu", "ll"))
        self.requests[rid] = request

    def _extra_keys(self, lora: str, lora_path: str, salt: str, images) -> dict:
        """The Request's LoRA adapter, cache salt and multimodal inputs (placeholders only: the
        manager reads their identifier and range, never their data)."""
        more = {}
        if lora:
            from vllm.lora.request import LoRARequest

            # an adapter's id: one per name, from 1 (vLLM refuses 0); the hashes read the
            # name and path, the KV events the name
            ids = self.__dict__.setdefault("_lora_ids", {})
            more["lora_request"] = LoRARequest(lora, ids.setdefault(lora, len(ids) + 1),
                                               lora_path)
        if salt:
            more["cache_salt"] = salt
        if images:
            from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange

            more["mm_features"] = [MultiModalFeatureSpec(
                data=None, modality="image", identifier=ident,
                mm_position=PlaceholderRange(offset=offset, length=length))
                for ident, offset, length in images]
        return more

    def _rehash(self, rid: int) -> None:
        """What the scheduler does before the lookup of a resumable request under lookahead
        hashing (scheduler.py 1111): its hashes cleared and made again from its tokens (a kept
        one may cover a token a streaming stop discarded)."""
        if self._hash_lookahead and rid in self._streamed:
            request = self.requests[rid]
            request.block_hashes.clear()
            request.update_block_hashes()

    def get_computed_blocks(self, rid: int, cap: int | None = None):
        """The lookup; `cap`: the scheduler's `max_cache_hit_length` (an auxiliary-output
        connector's), passed only where given."""
        self._rehash(rid)
        blocks, hit, *boundary = self.manager.get_computed_blocks(
            self.requests[rid], *(() if cap is None else (cap,)))
        boundary = boundary[0] if boundary else 0  # before vLLM 0.26: no boundary
        self.hits[rid] = blocks
        self.requests[rid].shared_prefix_boundary = int(boundary)  # as the scheduler does
        return _in_trace_order(self, _ids(blocks)), int(hit), int(boundary)

    def allocate_slots(self, rid: int, new: int, hit_tokens: int, admission: bool,
                       whole: bool = False, others_running: bool = False,
                       in_flight: int = 0):
        """As the scheduler allocates: with its draft tokens' slots (`num_lookahead_tokens`,
        given only where set) and the request's tokens still in flight."""
        request = self.requests[rid]
        request.num_in_flight_tokens = in_flight
        more = {"num_lookahead_tokens": self.lookahead} if self.lookahead else {}
        if admission and self.encoder_tokens:  # its encoder input, scheduled at admission
            more["num_encoder_tokens"] = self.encoder_tokens
        if admission:  # as the scheduler admits a waiting or preempted request
            method = self.manager.allocate_slots  # (others running: what the watermark reads)
            settings = {**taken(method, has_scheduled_reqs=others_running),
                        **asked(method, full_sequence_must_fit=whole)}
            got = self.manager.allocate_slots(request, new, num_new_computed_tokens=hit_tokens,
                                              new_computed_blocks=self.hits[rid],
                                              **settings, **more)
        else:
            got = self.manager.allocate_slots(request, new, **more)
        return _in_trace_order(self, _ids(got))

    def record_stats(self, rid: int, hits: int) -> None:
        """What the scheduler records after an admission that was made."""
        self.manager.record_prefix_cache_stats(self.requests[rid], hits)

    def stats(self):
        """`make_prefix_cache_stats()` (the scheduler's every step), as a tuple, or None."""
        made = self.manager.make_prefix_cache_stats()
        if made is None:
            return None
        return (made.requests, made.queries, made.hits, made.preempted_requests,
                made.preempted_queries, made.preempted_hits, bool(made.reset))

    def take_events(self) -> list:
        return plain_events(self.manager.take_events())

    def new_step_starts(self) -> None:
        self.manager.new_step_starts()

    def observed(self, copies: bool, events: bool, stats: bool) -> list:
        """What the scheduler drains every step, in its order and in one answer (one
        transcript record): `new_step_starts()`, then those asked of `block_copies`,
        `take_events` and `stats`."""
        self.new_step_starts()
        return [read() for read, asked in ((self.block_copies, copies),
                                           (self.take_events, events), (self.stats, stats))
                if asked]

    def set_computed(self, rid: int, count: int, status: str) -> None:
        """What the scheduler sets after a step: the computed tokens and the status (the
        watermark holds for waiting and preempted requests only); a preemption counts."""
        request = self.requests[rid]
        request.num_computed_tokens = count
        if status == "running":
            request.status = self._status.RUNNING
        elif status == "loading":  # an asynchronous KV load in progress
            request.status = self._status.WAITING_FOR_REMOTE_KVS
        elif status == "waiting":  # its load reported: waiting, or preempted if it was before
            request.status = self._status.PREEMPTED if request.num_preemptions else \
                self._status.WAITING
        else:
            request.status = self._status.PREEMPTED
            request.num_preemptions += 1

    def append_token(self, rid: int, token: int) -> None:
        self.requests[rid].append_output_token_ids(token)

    def stream(self, rid: int, tokens, discard: bool = False, images=()) -> None:
        """What vLLM's scheduler does to a resumable request that stops (`stream`): its
        outputs become prompt, the update's `tokens` are appended to both, its block hashes
        extended over them, and it waits (for an update, where `tokens` is empty). The token
        the engine's request sampled last and discards was never given to this one, unless
        `discard`: then it is this request's last, dropped with the hash of the block it
        completed (asynchronous scheduling, or speculative decoding's caching after an output);
        under lookahead hashing a hash covering it is kept, as the scheduler keeps it.
        `images`, the update's multimodal inputs, join the request's after its tokens."""
        request = self.requests[rid]
        self._streamed.add(rid)
        if discard:
            request._all_token_ids.pop()
            request._output_token_ids.pop()
            del request.block_hashes[request.num_tokens // self._hash_size:]
        request.prompt_token_ids.extend(request.output_token_ids)
        request._output_token_ids.clear()
        if images:  # (offsets from the update's first token: shifted as the scheduler does)
            base = request.num_tokens
            request.mm_features.extend(self._extra_keys("", "", "", [
                (ident, base + offset, length) for ident, offset, length in images])[
                    "mm_features"])
        request.prompt_token_ids.extend(tokens)
        request._all_token_ids.extend(tokens)
        request.num_prompt_tokens = len(request.prompt_token_ids)
        request.update_block_hashes()
        # (a release before streaming input has no such status: waiting is what it reads)
        paused = getattr(self._status, "WAITING_FOR_STREAMING_REQ", self._status.WAITING)
        request.status = self._status.WAITING if tokens else paused

    def free(self, rid: int, finished: bool = True) -> None:
        """As the scheduler frees: a finished request's status says so first (a preempted one
        is still running when its blocks go)."""
        request = self.requests[rid]
        if finished:
            request.status = self._status.FINISHED_STOPPED
        self.manager.free(request)

    def remove_skipped_blocks(self, rid: int, processed: int) -> None:
        request, method = self.requests[rid], self.manager.remove_skipped_blocks
        # the prompt's length only where taken: before vLLM 0.25 there is no R-SWA gap to evict
        method(request.request_id, processed,
               **taken(method, num_prompt_tokens=request.num_prompt_tokens))

    def pop_blocks_for_free(self, rid: int, finished: bool = True) -> list[int]:
        """A free the scheduler defers: `pop_blocks_for_free(request)`, the blocks it gives
        kept (in the order popped) for the `release` that frees them; their ids."""
        request = self.requests[rid]
        if finished:
            request.status = self._status.FINISHED_STOPPED
        blocks = list(self.manager.pop_blocks_for_free(request))
        if blocks:  # as the scheduler, which keeps a non-empty list only
            self.deferred.append((rid, blocks))
        return [int(block.block_id) for block in blocks]

    def release(self, rid: int) -> None:
        """The oldest deferred free of `rid` done as the scheduler's `_drain_deferred_frees`
        does it: the pool frees the popped blocks, last first."""
        index = next(i for i, (owner, _) in enumerate(self.deferred) if owner == rid)
        _, blocks = self.deferred.pop(index)
        self.manager.block_pool.free_blocks(reversed(blocks))

    def forget(self, rid: int) -> None:
        self.requests.pop(rid, None)
        self.hits.pop(rid, None)

    def reset_prefix_cache(self) -> bool:
        return self.manager.reset_prefix_cache()

    def evict_blocks(self, ids) -> None:
        self.manager.evict_blocks(set(ids))


def _seed_none_hash() -> None:
    """The hash before a request's first block, as `block_hash` makes it: an earlier vLLM's
    `init_none_hash` draws it from `os.urandom` when PYTHONHASHSEED is unset (and never calls
    the hash function), which no oracle could follow. It is a seed, not what is tested."""
    from vllm.v1.core import kv_cache_utils

    if bytes(kv_cache_utils.NONE_HASH) != NONE_HASH:
        kv_cache_utils.NONE_HASH = kv_cache_utils.BlockHash(NONE_HASH)


def _embeddings(values):
    """A prompt's embeddings: one float32 value a position (what a block's hash digests)."""
    import torch

    return torch.tensor([[float(v)] for v in values], dtype=torch.float32)
