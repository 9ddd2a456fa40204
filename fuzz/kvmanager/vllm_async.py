"""vLLM's `AsyncScheduler` stepped as its engine steps it (`Workload(async_scheduling=True)`,
`vllm_scheduler.py`): `EngineCore.step_with_batch_queue` with a batch queue of two (vLLM
0.33.0's `max_concurrent_batches` under asynchronous scheduling with the V1 model runner), so
step N+1 is scheduled before step N's output is processed, and each output comes one
scheduling later, with fake sampled tokens as the synchronous sessions have them.

Which requests of a step sample is fixed when the step is scheduled (a request whose chunk
ends its prompt, or a decode: not `is_prefill_chunk` after `_update_after_schedule`), as the
model runner would know it; the token itself is drawn when the output is made.

With speculative decoding (`Workload(speculative=...)`), `AsyncScheduler` schedules each decode
with the step's draft tokens (placeholders the worker fills in): the fake model accepts a
seeded number of them, 0 to all (its own stream, so the sampled tokens stay the session's
where no step has drafts), and returns the accepted ones and a bonus token; the drafts of a
padded admission (`pad_spec_decode`'s placeholder rows) are all rejected, as the rows are
no drafts.

With kvfuzz's fake KV connector (`Workload(fake_connector=True)`, `ASYNC_CONNECTOR`), the fake
worker's `KVConnectorOutput` for a step comes with that step's model output (the loads it
reports, its failures), so a load is reported while the next step is in flight; its aborts of
requests loading follow each output, as in the synchronous sessions. vLLM sets
`defer_block_free` itself then (a KV consumer under overlapping batches).

With structured output (`Workload(structured=share)`, `fake_grammar.py`), a step that has a
structured request's tokens in flight (`pending_structured_output_tokens`) has its bitmask, and
with drafts its drafts' filtering, after the output of the step before, as the engine defers it.

`Workload(v2_runner=True)` (`ASYNC_V2`) runs the session under vLLM's V2 model runner: the
scheduler merges resumed requests into the new ones' output and keeps no previous step's ids,
which the manager never sees (the recordings equal the V1 runner's). With `pipeline_stages=n`
too (n > 1) `AsyncScheduler` holds each request's next decode until `n` steps after its last
(`decode_stagger`, `next_decode_eligible_step`) and the engine's batch queue is `n + 1`
(`VllmConfig.max_concurrent_batches`), so a request has two steps in flight (back-to-back
prefill chunks): the session's guard is told (`steps_in_flight`, the queue less one), and the
trace's `steps_in_flight` keeps them (`async_ops.py`).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections import deque

# What the asynchronous sessions do not combine with yet (each refused before vLLM is built).
UNSUPPORTED = {"offload_bytes": "vLLM's CPU offloading connector", "embeds": "prompt embeddings"}


def asynchronous(config, workload) -> None:
    """The engine's config made asynchronous, as on a GPU: vLLM's CPU platform turns
    `scheduler_config.async_scheduling` off ("not required on CPU",
    `CpuPlatform.check_and_update_config`), a reason of this machine, not of the scheduler; on
    again, the config's `max_concurrent_batches` is 2 and its `max_in_flight_tokens` twice the
    step's tokens, and `get_scheduler_cls()` is `AsyncScheduler`. ValueError naming what
    `workload` asks that the asynchronous sessions do not drive yet."""
    asked = [what for name, what in UNSUPPORTED.items() if getattr(workload, name)]
    if asked:
        raise ValueError(f"Workload(async_scheduling=True) with {', '.join(asked)}: not "
                         f"driven by the asynchronous sessions yet")
    config.scheduler_config.async_scheduling = True
    if workload.pipeline_stages > 1:  # (read by the scheduler alone: no stages are started)
        config.parallel_config.pipeline_parallel_size = workload.pipeline_stages


@contextlib.contextmanager
def model_runner(workload):
    """For the session: the V2 model runner where `workload.v2_runner` asks for it
    (`VLLM_USE_V2_MODEL_RUNNER`, which `VllmConfig.use_v2_model_runner` reads at each use: the
    config's checks, the scheduler's construction, the batch queue and the tokens in flight; on
    this CPU it answers the V1 runner otherwise, Triton's kernels being absent)."""
    if workload.pipeline_stages > 1 and not workload.v2_runner:
        raise ValueError("Workload(pipeline_stages=...) without v2_runner: the V1 runner does "
                         "not overlap a pipeline's steps under asynchronous scheduling")
    if not workload.v2_runner:
        yield
        return
    if not workload.async_scheduling:
        raise ValueError("Workload(v2_runner=True) without async_scheduling: not driven (the "
                         "synchronous sessions are the V1 runner's)")
    before = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["VLLM_USE_V2_MODEL_RUNNER"]
        else:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = before


def run_pipelined(scheduler, arrivals, requests, result, rng, workload, seed: int, abort,
                  worker=None, streaming=None):
    """Steps `scheduler` until every request has finished (at most `workload.max_steps`
    scheduling steps): each loop schedules a step (arrivals first) and, once two are queued
    (or nothing more can be scheduled), processes the oldest one's output. `abort(scheduler,
    request_id)`: the synchronous sessions' abort of a request (1 if it was live); `worker`:
    the fake connector's worker side (`FakeWorker`), whose output for a step comes with that
    step's model output (the loads it reports, its failures), and whose aborts of requests
    loading come after it, as in the synchronous sessions. `streaming`: the session's
    streaming inputs (`vllm_streaming.py`), sent before each step is scheduled."""
    from vllm.v1.outputs import ModelRunnerOutput

    from kvfuzz.fuzz.kvmanager.fake_grammar import admit
    from kvfuzz.fuzz.kvmanager.vllm_aux import worker_output

    grammars = result.grammars  # the fake grammar backend (fake_grammar.py), if any
    if workload.deferred_aborts:
        scheduler.defer_block_free = True
    aborts = random.Random(f"deferred aborts {seed}")  # its own stream: the requests stay
    accepts = random.Random(f"accepted drafts {seed}")  # and the drafts accepted
    queue: deque = deque()  # (scheduler output, request ids, which of them sample), newest first
    # the engine's batch queue (`max_concurrent_batches`): two (one step in flight while the next
    # is scheduled), one more than the pipeline's stages under the V2 runner
    queue_size = scheduler.vllm_config.max_concurrent_batches
    while result.steps < workload.max_steps:
        while arrivals and arrivals[0][0] <= result.steps:
            admit(scheduler, arrivals.pop(0)[1])
        if streaming:
            streaming.before_step(scheduler, result.steps)
        # (a session waiting for its next update is no unfinished request to the scheduler)
        live = scheduler.has_requests() or bool(streaming and streaming.waiting(scheduler))
        if not arrivals and not live and not queue:
            break
        if live or arrivals:
            waiting = {request.request_id for request in scheduler.waiting}
            output = scheduler.schedule()
            result.steps += 1
            result.scheduled_tokens += output.total_num_scheduled_tokens
            ids = list(output.num_scheduled_tokens)
            samples = [_sampled(scheduler, output, rid, waiting) for rid in ids]
            queue.appendleft((output, ids, samples))
            if grammars:  # (fake_grammar.py: a step with grammar tokens in flight deferred)
                grammars.scheduled(scheduler, output)
            deferred = grammars and output.pending_structured_output_tokens  # (popped at once)
            if len(queue) < queue_size and not deferred and (
                    output.total_num_scheduled_tokens or scheduler.has_requests()):
                continue  # the engine does not wait on a step while the queue has room
        if not queue:
            continue
        output, ids, samples = queue.pop()
        if ids and aborts.random() < workload.deferred_aborts:
            result.deferred += abort(scheduler, aborts.choice(ids))
        # a sampled token for each request that samples, after the drafts it accepts
        sampled = [[rng.randrange(3, 1000) for _ in range(1 + accepts.randint(0, sample - 1))]
                   if sample > 1 else [rng.randrange(3, 1000)] if sample else []
                   for sample in samples]
        scheduler.update_from_output(output, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
            kv_connector_output=worker.output(output) if worker else None,
            aux_output_connector_output=worker_output(scheduler, output, ids, sampled)))
        if worker:
            worker.after(scheduler, requests)
        if grammars and queue:  # the deferred step's drafts filtered, then its bitmask
            queue[0] = grammars.after_output(scheduler, *queue[0])
        if streaming:
            streaming.after_step(scheduler, result.steps, output.total_num_scheduled_tokens)
    result.finished = sum(request.is_finished() for request in requests)
    result.preemptions = sum(request.num_preemptions for request in requests)
    return result


def _sampled(scheduler, output, request_id: str, waiting: set) -> int:
    """What the step's output holds for the request, fixed when the step is scheduled: 0 for
    a prefill chunk (no token), else 1 + the drafts it may accept (its scheduled draft
    tokens; none for the placeholder rows of a waiting request's padded admission)."""
    if scheduler.requests[request_id].is_prefill_chunk:
        return 0
    drafts = output.scheduled_spec_decode_tokens.get(request_id, ())
    return 1 + (0 if request_id in waiting else len(drafts))
