"""The "async streaming drafts" profile (`strategies/kvmanager/async_streaming_drafts.py`):
resumable (streaming-input) requests under vLLM's asynchronous scheduler with draft tokens,
traces shaped as the guarded `replace(ASYNC_STREAMING, speculative=...)` sessions, so the lock
step's asynchronous `stream` with `discard` over a step in flight of `1 + k` slots comes from
kvfuzz's own generator. The released class runs its traces clean (`test_every_profile.py`);
here: the traces are that scheduler's shape (no vLLM needed), and a manager that drops the
draft slots of a session resumed with its dropped step still in flight is caught on the
profile's trace, where the profiles nearest it run clean (slow: vLLM)."""

from __future__ import annotations

import functools
import inspect
from collections import Counter

import pytest

from kvfuzz.strategies.kvmanager import async_streaming, async_streaming_drafts
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import Decode, Placeholder, Sample, Schedule, Settle
from tests.helpers import divergence, double, walked, with_engine

KINDS = ("placeholder with drafts", "settle with rejected", "stop discarding its sampled token",
         "update at the stop", "update after a wait", "stale output of several tokens",
         "padded admission held in flight", "padded resumption held in flight",
         "stop by stale output", "eagle drop", "lookahead hashing", "mtp")


def _walk(trace) -> tuple[Counter, list[str]]:
    """What the trace does, and what the asynchronous scheduler with drafts never makes: a
    `decode`, a settle with nothing before it of its request, a padded `schedule` whose rows
    are not held in flight, a stop while running whose discarded token the trace lacks (no
    `discard`, or no `settle` of it just before), an update after a wait with `discard`."""
    made, problems, paused, resumable = Counter(), [], set(), set()
    ops = trace.ops
    made["eagle drop"] += trace.eagle
    made["lookahead hashing"] += bool(trace.hash_lookahead)
    made["mtp"] += bool(trace.prefill_lookahead)
    if not trace.lookahead or not trace.async_scheduling:
        problems.append("no draft slots, or synchronous")
    stale = Counter()
    for index, op in enumerate(ops):
        where = f"op {index} (r{getattr(op, 'rid', '-')})"
        if not (isinstance(op, Sample) and op.stale):
            if max(stale.values(), default=0) > 1:
                made["stale output of several tokens"] += 1
            stale.clear()
        if isinstance(op, Decode):
            problems.append(f"{where}: a decode")
        elif isinstance(op, Placeholder) and op.drafts:
            made["placeholder with drafts"] += 1
        elif isinstance(op, Settle) and op.rejected:
            made["settle with rejected"] += 1
        elif isinstance(op, Sample) and op.stale:
            stale[op.rid] += 1
        elif isinstance(op, Schedule) and op.pad:
            if not op.rows_in_flight or op.pad != min(op.pad, trace.lookahead):
                problems.append(f"{where}: padded rows not held in flight")
            made["padded resumption held in flight" if op.rid in resumable else
                 "padded admission held in flight"] += 1
        elif isinstance(op, Stream) and op.rid in paused:
            paused.discard(op.rid)
            made["update after a wait"] += 1
            if op.discard or not op.tokens:
                problems.append(f"{where}: an update after a wait with discard or no tokens")
        elif isinstance(op, Stream) and op.discard:
            made["stop discarding its sampled token"] += 1
            made["update at the stop"] += bool(op.tokens)
            paused |= {op.rid} if not op.tokens else set()
            resumable.add(op.rid)
            before = [o for o in ops[:index] if getattr(o, "rid", None) == op.rid]
            if not (before and isinstance(before[-1], Settle)):
                problems.append(f"{where}: a stop without its sampled token settled before")
        elif isinstance(op, Stream):  # a preempted session's stop by its stale output
            made["stop by stale output"] += 1
            paused |= {op.rid} if not op.tokens else set()
            resumable.add(op.rid)
    return made, problems


def _traces(generator=async_streaming_drafts.GENERATOR, count: int = 40) -> list:
    return [generator.generate(0, index) for index in range(count)]


def test_the_profiles_traces_stop_with_drafts_as_the_asynchronous_scheduler_does():
    traces = _traces()
    assert all(t.note == "profile async streaming drafts" for t in traces)
    made = walked(traces, _walk)
    assert all(made[kind] for kind in KINDS), made


def test_the_checks_fail_on_traces_not_of_that_shape():
    """The "async streaming" profile's traces (no drafts) are not this shape; nor is a stop
    moved before its request's `settle`."""
    assert all(_walk(t)[1] for t in _traces(async_streaming.GENERATOR, 10))
    trace = next(t for t in _traces() if any(isinstance(op, Stream) and op.discard
                                              for op in t.ops))
    ops = list(trace.ops)
    stop = next(i for i, op in enumerate(ops) if isinstance(op, Stream) and op.discard)
    settle = max(i for i in range(stop) if getattr(ops[i], "rid", None) == ops[stop].rid)
    moved = ops[:settle] + [ops[stop]] + ops[settle:stop] + ops[stop + 1:]
    assert _walk(type(trace)(**{**vars(trace), "ops": tuple(moved)}))[1]


@functools.cache
def doubles() -> dict:
    """The released class allocating a resumed session's step without its draft slots where
    the step its stop dropped is still in flight: a waiting request that holds computed tokens,
    whose prompt grew since its last allocation (a streaming update) and that has tokens in
    flight gets no `num_lookahead_tokens` (built on first use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")
    RequestStatus = load_attribute("vllm.v1.request:RequestStatus")
    released = KVCacheManager.allocate_slots
    signature = inspect.signature(released)

    class InFlightResumptionDraftsDropped(KVCacheManager):
        @functools.wraps(released)  # (its parameters, as the guard reads them)
        def allocate_slots(self, *args, **kwargs):
            bound = signature.bind(self, *args, **kwargs)
            request = bound.arguments["request"]
            prompts = self.__dict__.setdefault("_prompts", {})
            grown = request.num_prompt_tokens > prompts.get(request.request_id,
                                                            request.num_prompt_tokens)
            prompts[request.request_id] = request.num_prompt_tokens
            if request.status == RequestStatus.WAITING and request.num_computed_tokens and \
                    grown and getattr(request, "num_in_flight_tokens", 0):
                bound.arguments["num_lookahead_tokens"] = 0
            return released(*bound.args, **bound.kwargs)
    return {"InFlightResumptionDraftsDropped": InFlightResumptionDraftsDropped}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_async_streaming_drafts:...
    if name == "InFlightResumptionDraftsDropped":
        return doubles()[name]
    raise AttributeError(name)


DOUBLE = f"{__name__}:InFlightResumptionDraftsDropped"


@with_engine("vllm")
def test_a_manager_dropping_an_in_flight_resumptions_draft_slots_is_caught():
    """Caught on trace 11 (the released class clean there) at the resumption after an update,
    its dropped step still in flight (seed 0's first 30 scanned, 2026-12-06: 11 and 16 catch
    it)."""
    trace = async_streaming_drafts.GENERATOR.generate(0, 11)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, double("kvmanager", DOUBLE))
    assert found is not None
    calls = [line for line in found.report().splitlines() if line.strip().startswith("call")]
    assert calls and calls[0].split(None, 1)[1] == "allocate_slots(r1, 28) after a streaming " \
                                                   "update", found.report()


@with_engine("vllm")
@pytest.mark.parametrize("profile", ["async streaming", "async drafts", "streaming drafts"])
def test_no_nearby_profile_catches_it(profile):
    """"async streaming" resumes sessions with steps in flight but no draft slots; "async
    drafts" has drafts in flight and no sessions; "streaming drafts" resumes sessions with
    draft slots, nothing in flight: their first 20 run the double clean (60 of each scanned,
    2026-12-06)."""
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    generator = KVMANAGER.alone(profile).generator
    for index in range(20):
        assert divergence("kvmanager", generator.generate(0, index),
                          double("kvmanager", DOUBLE)) is None, (profile, index)
