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

from kvfuzz.impl.blockpool.driver import PoolReader
from kvfuzz.impl.driver_calls import taken
from kvfuzz.strategies.kvmanager.hashing import NONE_HASH, block_hash


def _ids(blocks) -> list[list[int]] | None:
    """A `KVCacheBlocks` (or None) as block ids per group."""
    return None if blocks is None else [[int(b) for b in ids] for ids in blocks.get_block_ids()]


class KVManagerDriver(PoolReader):
    def __init__(self, cls, blocks: int, block_size: int, window: int, max_model_len: int,
                 retention: int | None = None, max_in_flight_tokens: int | None = None,
                 watermark: float = 0.0):
        import torch
        from vllm.sampling_params import SamplingParams
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                                KVCacheGroupSpec, SlidingWindowSpec)
        from vllm.v1.request import Request, RequestStatus

        shape = dict(block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float16)
        specs = [FullAttentionSpec(**shape)]
        if window:
            specs.append(SlidingWindowSpec(**shape, sliding_window=window))
        config = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[],
                               kv_cache_groups=[KVCacheGroupSpec([f"layer{i}"], spec)
                                                for i, spec in enumerate(specs)],
                               **asked(KVCacheConfig,
                                       prefix_cache_retention_interval=retention))
        init_none_hash(block_hash)
        _seed_none_hash()
        self._hasher = get_request_block_hasher(block_size, block_hash)
        self._request_cls, self._params, self._status = Request, SamplingParams, RequestStatus
        self.manager = cls(config, max_model_len=max_model_len, hash_block_size=block_size,
                           enable_caching=True,
                           **taken(cls, scheduler_block_size=block_size),
                           **asked(cls, max_in_flight_tokens=max_in_flight_tokens,
                                   watermark=watermark))
        super().__init__(self.manager.block_pool, blocks)
        self.requests: dict[int, object] = {}
        self._hit: dict[int, object] = {}  # rid -> the KVCacheBlocks of its last lookup

    def arrive(self, rid: int, tokens) -> None:
        self.requests[rid] = self._request_cls(
            str(rid), prompt_token_ids=list(tokens),
            sampling_params=self._params(max_tokens=1 << 20), pooling_params=None,
            block_hasher=self._hasher)

    def get_computed_blocks(self, rid: int):
        blocks, hit, *boundary = self.manager.get_computed_blocks(self.requests[rid])
        boundary = boundary[0] if boundary else 0  # before vLLM 0.26: no boundary
        self._hit[rid] = blocks
        self.requests[rid].shared_prefix_boundary = int(boundary)  # as the scheduler does
        return _ids(blocks), int(hit), int(boundary)

    def allocate_slots(self, rid: int, new: int, hit_tokens: int, admission: bool,
                       whole: bool = False, others_running: bool = False):
        request = self.requests[rid]
        if admission:  # as the scheduler admits a waiting or preempted request
            method = self.manager.allocate_slots  # (others running: what the watermark reads)
            settings = {**taken(method, has_scheduled_reqs=others_running),
                        **asked(method, full_sequence_must_fit=whole)}
            got = self.manager.allocate_slots(request, new, num_new_computed_tokens=hit_tokens,
                                              new_computed_blocks=self._hit.pop(rid),
                                              **settings)
        else:
            got = self.manager.allocate_slots(request, new)
        return _ids(got)

    def set_computed(self, rid: int, count: int, status: str) -> None:
        """What the scheduler sets after a step: the computed tokens and the status (the
        watermark holds for waiting and preempted requests only)."""
        request = self.requests[rid]
        request.num_computed_tokens = count
        request.status = (self._status.RUNNING if status == "running"
                          else self._status.PREEMPTED)

    def append_token(self, rid: int, token: int) -> None:
        self.requests[rid].append_output_token_ids(token)

    def free(self, rid: int, finished: bool = True) -> None:
        """As the scheduler frees: a finished request's status says so first (a preempted one
        is still running when its blocks go)."""
        request = self.requests[rid]
        if finished:
            request.status = self._status.FINISHED_STOPPED
        self.manager.free(request)

    def forget(self, rid: int) -> None:
        self.requests.pop(rid, None)

    def reset_prefix_cache(self) -> bool:
        return self.manager.reset_prefix_cache()

    def evict_blocks(self, ids) -> None:
        self.manager.evict_blocks(set(ids))

    def block_ids(self, rid: int) -> list[list[int]]:
        return [[int(b) for b in ids] for ids in self.manager.get_block_ids(str(rid))]


def _seed_none_hash() -> None:
    """The hash before a request's first block, as `block_hash` makes it: an earlier vLLM's
    `init_none_hash` draws it from `os.urandom` when PYTHONHASHSEED is unset (and never calls
    the hash function), which no oracle could follow. It is a seed, not what is tested."""
    from vllm.v1.core import kv_cache_utils

    if bytes(kv_cache_utils.NONE_HASH) != NONE_HASH:
        kv_cache_utils.NONE_HASH = kv_cache_utils.BlockHash(NONE_HASH)


def asked(fn, **settings) -> dict:
    """The trace's `settings` for `fn`: all it takes, and any other that is not at its neutral
    value (None, 0, False): a class that cannot take a setting a trace asks for fails on it,
    as it would in an engine, rather than run without it (a released class that lacks one
    declares so: `released_api`, and such traces are outside its contract)."""
    return {**taken(fn, **settings),
            **{name: value for name, value in settings.items() if value not in (None, 0, False)}}


def released_api(cls) -> dict[str, bool]:
    """Which of the engine's settings a manager class (and the installed vLLM's KV-cache
    config) takes: what a trace may ask of it."""
    from vllm.v1.kv_cache_interface import KVCacheConfig

    return {"retention": bool(taken(KVCacheConfig, prefix_cache_retention_interval=None)),
            "in_flight": bool(taken(cls, max_in_flight_tokens=None)),
            "watermark": bool(taken(cls, watermark=0.0)),
            "whole": bool(taken(cls.allocate_slots, full_sequence_must_fit=False))}
