"""vLLM's own v1 `Scheduler` (vllm 0.33.0) as a real client of a `KVCacheManager`: built on
the CPU with no model download, fed seeded requests that share prefixes, with chunked prefill
and a block budget small enough to preempt, stepped with fake model outputs (one sampled token
per request whose prompt is done) until every request has finished.

    session = run_session(seed=0, wrap=lambda manager: kvfuzz.guard(manager, "kvmanager"))

`wrap` replaces the scheduler's manager before the first step (`kvfuzz.guard` or
`kvfuzz.record`); the scheduler then calls it as it calls its own. `Workload(offload_bytes=n)`
adds vLLM's CPU offloading connector, its worker side answered by `offload_worker.py`;
`Workload(fake_connector=True)` a deterministic fake one, seeded by the session's seed
(`fake_connector.py`); `Workload(async_scheduling=True)` vLLM's `AsyncScheduler`, stepped as
its engine steps it (`vllm_async.py`), with the fake connector too;
`Workload(streaming=share)` makes that share of the requests resumable, fed seeded streaming
updates (`vllm_streaming.py`; the synchronous scheduler only); `Workload(structured=share)` gives
that share a grammar of a seeded fake backend (`fake_grammar.py`); `Workload(aux_outputs=True)`
turns vLLM's auxiliary outputs on (`vllm_aux.py`: every admission's lookup capped).

The scheduler is built by `vllm_build.build_scheduler` (re-exported here).
"""

from __future__ import annotations

import random

from kvfuzz.fuzz.kvmanager import vllm_workloads
from kvfuzz.fuzz.kvmanager.vllm_workloads import (  # noqa: F401 (named here too)
    SessionResult, Workload, FAKE_CONNECTOR, ZEROING, ZEROING_CONNECTOR, EXTRA_KEYS,
    LOOKAHEAD_HASHES, EAGLE_GROUPS, MTP, PROMPT_EMBEDS, ASYNC, ASYNC_SPEC, ASYNC_CONNECTOR,
    SPEC_CONNECTOR, STREAMING, ASYNC_STREAMING, ASYNC_V2, STRUCTURED, SPEC_STRUCTURED,
    ASYNC_STRUCTURED, ASYNC_SPEC_STRUCTURED, SPEC_DRAFTS, MTP_DRAFTS, MAMBA_ALIGN,
    MAMBA_MTP, MAMBA_MTP_HASHES, MAMBA_MTP_MODULES, MAMBA_PARTIAL, MAMBA_CONNECTOR,
    MAMBA_PARTIAL_CONNECTOR, MAMBA_ASYNC, MAMBA_ASYNC_CONNECTOR, MAMBA_ASYNC_MTP, MAMBA_EAGLE,
    MAMBA_SHARED_PREFIX, MAMBA_ASYNC_SHARED_PREFIX, MAMBA_EAGLE_MTP,
    MAMBA_ASYNC_CONNECTOR_ABORTS, MAMBA_EAGLE_CONNECTOR, MAMBA_MTP_CONNECTOR,
    MAMBA_ASYNC_MTP_CONNECTOR, AUX_OUTPUTS, AUX_CONNECTOR, AUX_MAMBA, AUX_MAMBA_CONNECTOR,
    AUX_MAMBA_EAGLE_CONNECTOR)
from kvfuzz.fuzz.kvmanager.fake_grammar import (admit, plain_drafter, session_grammars,
                                                structured_params)
from kvfuzz.fuzz.kvmanager.vllm_build import build_scheduler  # (named here too)


def _requests(scheduler, workload: Workload, rng: random.Random, manager_class=None):
    """(arrival step, Request) pairs: prefixes of whole blocks shared within each group. Their
    block hasher is the engine's (`get_request_block_hasher`), or `manager_class`'s where it
    names one (`request_block_hasher`: a mutant of the hasher, which the engine would build
    from the edited module as it builds the released one)."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    hash_fn = get_hash_fn_by_name(scheduler.vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    factory = getattr(manager_class, "request_block_hasher", get_request_block_hasher)
    hasher = factory(getattr(scheduler, "hash_block_size", None) or workload.block_size, hash_fn,
                     scheduler.num_hash_lookahead_tokens)
    token = lambda: rng.randrange(3, 1000)  # noqa: E731 - below the vocabulary's size
    prefixes = [[token() for _ in range(workload.block_size * rng.randint(1, 5))]
                for _ in range(workload.groups)]
    prompts = [prefix + [token() for _ in range(rng.randint(1, workload.max_prompt
                                                            - len(prefix)))]
               for prefix in prefixes for _ in range(workload.per_group)]
    prompts += [[token() for _ in range(rng.randint(1, workload.max_prompt))]
                for _ in range(workload.loners)]
    rng.shuffle(prompts)
    made, keyed = [], random.Random(f"extra keys {len(prompts)}")
    embedded = random.Random(f"embeds {len(prompts)}")  # a stream of its own, as the keys'
    shaped = random.Random(f"structured {prompts[0]}")  # and the grammars', per session
    for index, prompt in enumerate(prompts):
        params = SamplingParams(max_tokens=rng.randint(1, workload.max_tokens), ignore_eos=True)
        params.structured_outputs = structured_params(shaped, index, workload.structured)
        given = {"prompt_token_ids": prompt}
        if workload.embeds and embedded.random() < workload.embeds:
            from kvfuzz.fuzz.kvmanager.vllm_speculative import embeddings

            given = {"prompt_token_ids": None, "prompt_embeds": embeddings(prompt)}
        request = Request(f"req-{index}", sampling_params=params, pooling_params=None,
                          arrival_time=float(index), block_hasher=hasher, **given,
                          **_extra_keys(workload, keyed))
        made.append((0 if index < len(prompts) // 2 else rng.randint(1, 12), request))
    return sorted(made, key=lambda pair: pair[0])


def _extra_keys(workload: Workload, rng: random.Random) -> dict:
    """A request's cache salt and LoRA adapter, as the workload's shares draw them."""
    keys = {}
    if workload.salts and rng.random() < workload.salts:
        keys["cache_salt"] = rng.choice(("tenant-1", "tenant-2"))
    if workload.loras and rng.random() < workload.loras:
        from vllm.lora.request import LoRARequest

        number = rng.randint(1, 2)
        keys["lora_request"] = LoRARequest(f"adapter-{number}", number, f"/adapters/{number}")
    return keys


def run_session(seed: int = 0, wrap=None, workload: Workload = Workload(),
                manager_class=None, wrap_pool=None, pool_class=None) -> SessionResult:
    """One seeded scheduler session, every request run to its end (at most
    `workload.max_steps` steps). `wrap(manager, **settings)` stands in for the scheduler's
    manager, given what the manager does not keep (`max_in_flight_tokens`, and
    `num_lookahead_tokens` where there are draft tokens, `async_scheduling` where the scheduler
    is asynchronous); `wrap_pool(pool)`
    for the block pool the manager's coordinator built, wherever it is held."""
    from kvfuzz.fuzz.kvmanager.vllm_async import model_runner

    # (the config reads its model runner at each use: the batch queue, the tokens in flight)
    with model_runner(workload):
        return _run_session(seed, wrap, workload, manager_class, wrap_pool, pool_class)


def _run_session(seed, wrap, workload, manager_class, wrap_pool, pool_class) -> SessionResult:
    rng = random.Random(seed)
    scheduler = build_scheduler(workload, manager_class, pool_class, seed)  # prepares vLLM
    from vllm.v1.outputs import ModelRunnerOutput

    from kvfuzz.fuzz.kvmanager.fake_connector import FakeWorker
    from kvfuzz.fuzz.kvmanager.offload_worker import InstantWorker

    if wrap_pool is not None:
        replace_pool(scheduler.kv_cache_manager, wrap_pool)
    if wrap is not None:
        # the draft tokens' slots every allocation reserves: given only where there are some
        lookahead = {"num_lookahead_tokens": scheduler.num_lookahead_tokens} \
            if scheduler.num_lookahead_tokens else {}
        lookahead |= {"async_scheduling": True} if workload.async_scheduling else {}
        if workload.pipeline_stages > 1:  # a request's steps in flight (vllm_async.py)
            lookahead["steps_in_flight"] = scheduler.vllm_config.max_concurrent_batches - 1
        scheduler.kv_cache_manager = wrap(
            scheduler.kv_cache_manager,
            max_in_flight_tokens=scheduler.vllm_config.max_in_flight_tokens, **lookahead)
    arrivals = _requests(scheduler, workload, rng, manager_class)
    requests = [request for _, request in arrivals]
    result = SessionResult(0, 0, len(requests), 0, scheduler.kv_cache_manager)
    grammars = result.grammars = session_grammars(scheduler, workload, seed)
    if workload.async_scheduling:
        from kvfuzz.fuzz.kvmanager.vllm_async import run_pipelined


        worker = FakeWorker(seed, workload.abort_loads) if workload.fake_connector else None
        streaming = result.streaming = _streaming(seed, workload, requests)
        result = run_pipelined(scheduler, arrivals, requests, result, rng, workload, seed,
                               _abort_in_flight, worker, streaming)
        if worker:
            result.loads, result.stores = worker.loads, worker.stores
            result.aborted, result.sync_failures = worker.aborted, worker.sync_failures
        if grammars:
            grammars.count(requests)
        if wrap_pool is not None:
            result.pool = scheduler.kv_cache_manager.coordinator.block_pool
        return result
    # the connector's worker side, when there is one
    worker = FakeWorker(seed, workload.abort_loads) if workload.fake_connector else \
        InstantWorker()
    if workload.deferred_aborts:
        scheduler.defer_block_free = True
    aborts = random.Random(f"deferred aborts {seed}")  # its own stream: the requests stay
    streaming = result.streaming = _streaming(seed, workload, requests)
    drafter = grammars.drafter(scheduler) if grammars else \
        plain_drafter(scheduler, seed) if workload.drafts else None
    while result.steps < workload.max_steps:
        while arrivals and arrivals[0][0] <= result.steps:
            admit(scheduler, arrivals.pop(0)[1])
        if streaming:
            streaming.before_step(scheduler, result.steps)
        # (a session waiting for its next update is no unfinished request to the scheduler)
        if not arrivals and not scheduler.has_requests() and \
                not (streaming and streaming.waiting(scheduler)):
            break
        output = scheduler.schedule()
        result.steps += 1
        if grammars:
            grammars.scheduled(scheduler, output)
        ids = list(output.num_scheduled_tokens)
        result.scheduled_tokens += output.total_num_scheduled_tokens
        # One sampled token for each request whose prompt is done, none for a prefill chunk
        # (with the fake drafter's drafts: those it accepts before it)
        sampled = [[] if scheduler.requests[rid].is_prefill_chunk else
                   (drafter.accepted(output, rid) if drafter else []) + [rng.randrange(3, 1000)]
                   for rid in ids]
        if ids and aborts.random() < workload.deferred_aborts:
            result.deferred += _abort_in_flight(scheduler, aborts.choice(ids))
        scheduler.update_from_output(output, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled, kv_connector_output=worker.output(output)))
        worker.after(scheduler, requests)
        if streaming:
            streaming.after_step(scheduler, result.steps, output.total_num_scheduled_tokens)
        if drafter:  # the engine's post_step: the drafts proposed with the step's output
            drafter.propose(scheduler, ids)
    if grammars:
        grammars.count(requests)
    result.finished = sum(request.is_finished() for request in requests)
    result.preemptions = sum(request.num_preemptions for request in requests)
    result.loads, result.stores = worker.loads, worker.stores
    result.aborted = getattr(worker, "aborted", 0)
    result.sync_failures = getattr(worker, "sync_failures", 0)
    if wrap_pool is not None:
        result.pool = scheduler.kv_cache_manager.coordinator.block_pool
    return result


def _streaming(seed: int, workload: Workload, requests):
    """The session's streaming inputs (`vllm_streaming.py`), if the workload has some."""
    if not workload.streaming:
        return None
    from kvfuzz.fuzz.kvmanager.vllm_streaming import StreamingInputs

    return StreamingInputs(seed, workload, requests)


def _abort_in_flight(scheduler, request_id: str) -> int:
    """A request aborted while its step is in flight (a client's abort between the step's
    scheduling and its output): with `defer_block_free` the scheduler pops its blocks
    (`pop_blocks_for_free`) and frees them once the step is processed. 1 if it was live."""
    from vllm.v1.request import RequestStatus

    if request_id not in scheduler.requests:
        return 0
    scheduler.finish_requests(request_id, RequestStatus.FINISHED_ABORTED)
    return 1


def replace_pool(manager, wrap_pool) -> None:
    """The pool the coordinator built, replaced by `wrap_pool(pool)` in every holder of it (the
    manager, the coordinator, each group's manager), before its first call: as if vLLM's
    coordinator had built the wrapped one (the construction site `kvfuzz guard blockpool`
    patches)."""
    coordinator = manager.coordinator
    pool = coordinator.block_pool
    wrapped = wrap_pool(pool)
    for holder in (manager, coordinator, *coordinator.single_type_managers):
        if getattr(holder, "block_pool", None) is pool:
            holder.block_pool = wrapped


def recording(seed: int, target: str = "kvmanager", connector: bool = False,
              workload: str | None = None):
    """Session `seed`'s calls on the manager (`target` "kvmanager") or on its pool
    ("blockpool"), recorded (`kvfuzz.record`) as a trace that names where it came from: what
    corpus/ keeps of vLLM's own scheduler, regenerated by this call; `connector`: with the fake
    KV connector (`FAKE_CONNECTOR`); `workload`: the name of one of this module's (e.g.
    "MTP")."""
    from dataclasses import replace

    from kvfuzz.fuzz.engine.guard import live_guard

    guard = live_guard(target)
    named = workload
    workload = FAKE_CONNECTOR if connector else getattr(vllm_workloads, named) if named \
        else Workload()
    if target == "blockpool":
        session = run_session(seed, wrap_pool=lambda pool: guard(pool, check=False),
                              workload=workload)
        recorded = session.pool.kvfuzz_session
    else:
        session = run_session(seed, lambda manager, **settings: guard(manager, check=False,
                                                                     **settings),
                              workload=workload)
        recorded = session.manager.kvfuzz_session
    with_connector = ", connector=True" if connector else ""
    with_connector += f", workload={named!r}" if named else ""
    return replace(recorded.trace(), note=(
        f"recorded (kvfuzz.record) from vLLM's v1 Scheduler: "
        f"kvfuzz.fuzz.kvmanager.vllm_scheduler.recording({seed}, {target!r}{with_connector})"))
