"""The "async streaming" profile (`strategies/kvmanager/async_streaming.py`): resumable
(streaming-input) requests under vLLM's asynchronous scheduler, traces shaped as the guarded
`ASYNC_STREAMING` sessions, so the lock step's `stream` with `discard`, a waiting request's
dropped step (`processed`) and a stop by stale output come from kvfuzz's own generator. The
released class runs its traces clean (`test_every_profile.py`); here: the traces are the
scheduler's shape (no vLLM needed), and mutants are caught on the profile's traces where only
its stops reach them (slow: vLLM): a manager that ignores a waiting request's tokens in flight
(a test double; no other profile's traces catch it), and two catalogue mutants. And the
profile's stops with the next step in flight, which the guard's sessions never make (they
ignore EOS), are the release's: with stop tokens, vLLM's `AsyncScheduler` makes them, guarded
clean, and a lock step keeping the dropped step in flight is caught there."""

from __future__ import annotations

import functools
import inspect
from collections import Counter

import pytest

import kvfuzz
from kvfuzz.fuzz.kvmanager import streaming
from kvfuzz.strategies.kvmanager import async_streaming, streaming_input
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import (Arrive, Finish, Placeholder, Preempt, Processed,
                                               Sample, Schedule, Settle)
from tests.helpers import divergence, double, with_engine

KINDS = ("stop, waiting", "update at the stop", "update after a wait", "resumption",
         "resumption, its dropped step in flight", "dropped step processed while waiting",
         "stop by stale output", "end while waiting")


def _walk(trace) -> tuple[Counter, list[str]]:
    """What the trace's sessions do, and what the asynchronous scheduler never makes: a stop
    without `discard` of a running request (the post-output caching always saw its token), a
    `stream` of a request in another state, a waiting session scheduled before its update or
    sampling, settling or preempted, a `processed` of a waiting session with nothing in flight
    (its stop came after its last step's output)."""
    made, problems, state = Counter(), [], {}
    in_flight = set()  # an allocation since its last output came with nothing in flight
    for index, op in enumerate(trace.ops):
        rid = getattr(op, "rid", -1)
        where, now = f"op {index} (r{rid})", state.get(rid)
        if isinstance(op, Arrive):
            state[rid] = "waiting"
        elif isinstance(op, Stream):
            if now == "running" and op.discard:
                made["update at the stop" if op.tokens else "stop, waiting"] += 1
                state[rid] = "holding" if op.tokens else "paused"
            elif now in ("paused", "paused, no blocks") and op.tokens and not op.discard:
                made["update after a wait"] += 1
                state[rid] = "holding" if now == "paused" else "waiting"
            elif now == "preempted" and not op.discard:  # (its stale output stopped it)
                made["stop by stale output"] += 1
                state[rid] = "waiting" if op.tokens else "paused, no blocks"
            else:
                problems.append(f"{where}: stream{' (discard)' * op.discard} of a request {now}")
        elif isinstance(op, Processed):
            if now in ("holding", "paused"):
                made["dropped step processed while waiting"] += 1
                if rid not in in_flight:
                    problems.append(f"{where}: processed of a request {now}, nothing in flight")
            in_flight.discard(rid)
        elif isinstance(op, (Schedule, Placeholder)):
            if now in ("paused", "paused, no blocks"):
                problems.append(f"{where}: scheduled before its update")
            if now == "holding":
                made["resumption"] += 1
                made["resumption, its dropped step in flight"] += rid in in_flight
            in_flight.add(rid)
            state[rid] = "running"
        elif isinstance(op, (Sample, Settle, Preempt)):
            if now in ("paused", "holding", "paused, no blocks"):
                problems.append(f"{where}: {type(op).__name__.lower()} of a request {now}")
            if isinstance(op, Preempt):
                state[rid] = "preempted"
                in_flight.discard(rid)
        elif isinstance(op, Finish):
            made["end while waiting"] += now in ("paused", "holding", "paused, no blocks")
            state.pop(rid, None)
    return made, problems


def _traces(generator=async_streaming.GENERATOR, count: int = 40) -> list:
    return [generator.generate(0, index) for index in range(count)]


def test_the_profiles_traces_stop_update_and_resume_as_the_async_scheduler_does():
    traces = _traces()
    assert all(t.note == "profile async streaming" and t.async_scheduling for t in traces)
    assert any(t.window for t in traces) and any(t.full_sequence_must_fit for t in traces)
    walked = [_walk(trace) for trace in traces]
    assert [(t.origin, problems[:5]) for t, (_, problems) in zip(traces, walked) if problems] \
        == []
    made = sum((counts for counts, _ in walked), Counter())
    assert all(made[kind] for kind in KINDS), made


def test_the_checks_fail_on_traces_not_of_that_shape():
    """The checks above can fail: the synchronous "streaming" profile stops without `discard`;
    a resumption moved before the update that brings it, or a `processed` of a session whose
    stop came after its last step's output, is not the asynchronous scheduler's shape."""
    assert all(_walk(t)[1] for t in _traces(streaming_input.GENERATOR, 10) if any(
        isinstance(op, Stream) for op in t.ops))
    trace = next(t for t in _traces() if _walk(t)[0]["update after a wait"])
    ops = list(trace.ops)
    wait = next(i for i, op in enumerate(ops) if isinstance(op, Stream) and op.tokens and
                not op.discard and any(isinstance(o, Stream) and o.rid == op.rid and o.discard
                                       and not o.tokens for o in ops[:i]))
    resumed = next(i for i in range(wait, len(ops)) if isinstance(ops[i], Schedule)
                   and ops[i].rid == ops[wait].rid)
    early = ops[:wait] + [ops[resumed]] + ops[wait:resumed] + ops[resumed + 1:]
    assert _walk(type(trace)(**{**vars(trace), "ops": tuple(early)}))[1]
    stop = next(i for i, op in enumerate(ops) if isinstance(op, Stream) and op.discard and
                _sat_out(ops[:i], op.rid))
    processed = ops[:stop + 1] + [Processed(ops[stop].rid)] + ops[stop + 1:]
    assert _walk(type(trace)(**{**vars(trace), "ops": tuple(processed)}))[1]


def _sat_out(ops, rid: int) -> bool:
    """Whether `rid`'s last step's output came with nothing of it in flight: a `processed`
    since its last allocation."""
    mine = [op for op in ops if getattr(op, "rid", -1) == rid]
    return next(isinstance(op, Processed) for op in reversed(mine)
                if isinstance(op, (Processed, Schedule, Placeholder)))


@functools.cache
def doubles() -> dict:
    """The released class with a waiting request's tokens in flight ignored where it
    allocates: a resumption whose dropped step is still in flight frees the window's blocks
    as if that step's output had come (built on first use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")
    RequestStatus = load_attribute("vllm.v1.request:RequestStatus")
    released = KVCacheManager.allocate_slots
    signature = inspect.signature(released)

    class WaitingInFlightIgnored(KVCacheManager):
        @functools.wraps(released)  # (its parameters)
        def allocate_slots(self, *args, **kwargs):
            request = signature.bind(self, *args, **kwargs).arguments["request"]
            kept = request.num_in_flight_tokens
            if request.status == RequestStatus.RUNNING or not kept:
                return released(self, *args, **kwargs)
            request.num_in_flight_tokens = 0
            try:
                return released(self, *args, **kwargs)
            finally:
                request.num_in_flight_tokens = kept
    return {"WaitingInFlightIgnored": WaitingInFlightIgnored}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_async_streaming:...
    if name == "WaitingInFlightIgnored":
        return doubles()[name]
    raise AttributeError(name)


# Each caught on the profile's trace `index` (the released class clean there) at the call
# named (seed 0's first 30 traces scanned, 2026-12-06): a resumption with its stop's dropped
# step still in flight (the double); the frontier after a stop with `discard`, whose dropped
# step's slot lies past it (`get_block_ids_for_computed_tokens` unclipped); a resumption after
# an update whose window moved for tokens not yet computed.
CAUGHT = [(f"{__name__}:WaitingInFlightIgnored", 25, "allocate_slots(r1, 3) after a streaming "
           "update"),
          ("mutant.vllm.kvmanager.computed_ids_unclipped", 1, "r0 waits for a streaming update"),
          ("mutant.vllm.kvmanager.window_moves_early", 1, "allocate_slots(r1, 7) after a "
           "streaming update")]


@with_engine("vllm")
@pytest.mark.parametrize("impl, index, call", CAUGHT, ids=[c[0].split(".")[-1] for c in CAUGHT])
def test_a_manager_fault_the_profiles_stops_reach_is_caught_there(impl, index, call):
    trace = async_streaming.GENERATOR.generate(0, index)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, double("kvmanager", impl) if ":" in impl else impl)
    assert found is not None, impl
    calls = [line for line in found.report().splitlines() if line.strip().startswith("call")]
    assert calls and calls[0].split(None, 1)[1] == call, found.report()


@with_engine("vllm")
@pytest.mark.parametrize("profile", ["async outputs", "async connector", "streaming"])
def test_no_other_profile_reaches_a_waiting_requests_tokens_in_flight(profile):
    """The double above runs the first 20 traces of the profiles nearest this one clean (none
    resumes a request with a step in flight: 100 each scanned, 2026-12-06)."""
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    stream = KVMANAGER.alone(profile).generator
    impl = double("kvmanager", f"{__name__}:WaitingInFlightIgnored")
    assert all(divergence("kvmanager", stream.generate(0, index), impl) is None
               for index in range(20))


def _stop_token_session(tmp_path, monkeypatch):
    """`ASYNC_STREAMING` session 0 guarded, every request given stop tokens (about 8% of the
    fake model's tokens 3 to 999)."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    vllm_scheduler.build_scheduler()  # (prepares vLLM's import)
    import vllm.sampling_params

    released = vllm.sampling_params.SamplingParams
    monkeypatch.setattr(vllm.sampling_params, "SamplingParams", lambda *args, **kwargs:
                        released(*args, **kwargs, stop_token_ids=list(range(3, 80))))
    return vllm_scheduler.run_session(
        0, lambda manager, **settings: kvfuzz.guard(manager, "kvmanager", corpus=tmp_path,
                                                    **settings),
        workload=vllm_scheduler.ASYNC_STREAMING)


@with_engine("vllm")
def test_the_released_async_scheduler_drops_a_stops_step_in_flight_as_the_profile_does(
        tmp_path, monkeypatch):
    """The guard's `ASYNC_STREAMING` sessions stop at `max_tokens` only (`ignore_eos`), with
    nothing in flight; given stop tokens, vLLM's `AsyncScheduler` stops sessions with their
    next step in flight, and session 0 runs guarded clean through both of the profile's new
    edge classes: the dropped step processed while the session waits, and a resumption before
    it was (the engine's tokens in flight checked against the lock step's at the call)."""
    run = _stop_token_session(tmp_path, monkeypatch)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests, run
    events = guarded.lock.events
    assert events[streaming.DROPPED_PROCESSED] and events[streaming.RESUMED_IN_FLIGHT], events


@with_engine("vllm")
def test_a_lock_step_keeping_a_waiting_requests_dropped_step_in_flight_is_caught(
        tmp_path, monkeypatch):
    """The check above can fail: a lock step that ignores a waiting request's `processed` (its
    dropped step kept in flight) resumes it with a token in flight where the engine has none."""
    from kvfuzz.fuzz.engine.lockstep import handles
    from kvfuzz.fuzz.kvmanager.lockstep import KVManagerLockstep

    released = KVManagerLockstep.processed

    def ignored_while_waiting(self, op):
        request = self.requests.get(op.rid)
        if request is None or request.status != "waiting":
            yield from released(self, op)
    monkeypatch.setattr(KVManagerLockstep, "processed",
                        handles(Processed)(ignored_while_waiting))
    with pytest.raises(kvfuzz.Mismatch, match="the lock step resumes with"):
        _stop_token_session(tmp_path, monkeypatch)
