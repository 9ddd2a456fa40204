"""The "streaming drafts" profile (`strategies/kvmanager/streaming_drafts.py`): resumable
(streaming-input) requests under vLLM's synchronous scheduler with draft tokens and lookahead
hashing, traces shaped as the guarded `replace(STREAMING, speculative=...)` sessions, so the lock
step's synchronous `stream` with `discard` and the hash a stop keeps over its discarded token
come from kvfuzz's own generator. The released class runs its traces clean
(`test_every_profile.py`); here: the traces are that scheduler's shape (no vLLM needed), and a
manager that drops a resumed session's draft slots is caught on the profile's trace, where the
profiles nearest it run clean (slow: vLLM)."""

from __future__ import annotations

import functools
import inspect
from collections import Counter

import pytest

from kvfuzz.strategies.kvmanager import streaming_drafts, streaming_input
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import Decode, Sample, Schedule, Settle
from tests.helpers import divergence, double, walked, with_engine

KINDS = ("stop discarding its cached token", "update at the stop", "update after a wait",
         "settle", "eagle drop", "lookahead hashing", "mtp", "update with images")


def _walk(trace) -> tuple[Counter, list[str]]:
    """What the trace does, and what the synchronous scheduler with drafts never makes: a
    `decode` (its outputs are `sample` and `settle`, the next step a `schedule`), a sample not
    cached after its output, a stop whose discarded token the trace lacks (no `discard`, or no
    `sample` and `settle` of it just before), an update after a wait with `discard`, a
    `schedule` without the draft count as `pad`."""
    made, problems, paused = Counter(), [], set()
    ops = trace.ops
    made["eagle drop"] += trace.eagle
    made["lookahead hashing"] += bool(trace.hash_lookahead)
    made["mtp"] += bool(trace.prefill_lookahead)
    if not trace.lookahead or trace.async_scheduling:
        problems.append("no draft slots, or asynchronous")
    for index, op in enumerate(ops):
        where = f"op {index} (r{getattr(op, 'rid', '-')})"
        if isinstance(op, Decode):
            problems.append(f"{where}: a decode")
        elif isinstance(op, Sample) and not (index + 1 == len(ops) or  # (the trace cut)
                                             ops[index + 1] == Settle(op.rid)):
            problems.append(f"{where}: a sample not cached after its output")
        elif isinstance(op, Settle):
            made["settle"] += 1
        elif isinstance(op, Schedule) and op.pad != trace.lookahead:
            problems.append(f"{where}: a schedule padded by {op.pad}")
        elif isinstance(op, Stream) and op.images and not all(
                0 <= a[1] and a[1] + a[2] <= b[1] for a, b in zip(
                    op.images, op.images[1:] + (("", len(op.tokens), 0),))):
            problems.append(f"{where}: images out of order or past the update's tokens")
        elif isinstance(op, Stream) and op.rid in paused:
            paused.discard(op.rid)
            made["update after a wait"] += 1
            made["update with images"] += bool(op.images)
            if op.discard or not op.tokens:
                problems.append(f"{where}: an update after a wait with discard or no tokens")
        elif isinstance(op, Stream):
            made["stop discarding its cached token"] += 1
            made["update with images"] += bool(op.images)
            made["update at the stop"] += bool(op.tokens)
            if not op.tokens:
                paused.add(op.rid)
            if not (op.discard and index >= 2 and ops[index - 2:index] == (
                    Sample(op.rid, ops[index - 2].token), Settle(op.rid))):
                problems.append(f"{where}: a stop without its sampled token discarded")
    return made, problems


def _traces(generator=streaming_drafts.GENERATOR, count: int = 40) -> list:
    return [generator.generate(0, index) for index in range(count)]


def test_the_profiles_traces_stop_with_drafts_as_the_synchronous_scheduler_does():
    traces = _traces()
    assert all(t.note == "profile streaming drafts" for t in traces)
    made = walked(traces, _walk)
    assert all(made[kind] for kind in KINDS), made


def test_the_checks_fail_on_traces_not_of_that_shape():
    """The "streaming" profile's stops (no drafts, no `discard`, decodes) are not this shape;
    nor is a stop whose `sample` was moved away from it."""
    assert all(_walk(t)[1] for t in _traces(streaming_input.GENERATOR, 10))
    trace = next(t for t in _traces() if any(isinstance(op, Stream) for op in t.ops))
    ops = list(trace.ops)
    stop = next(i for i, op in enumerate(ops) if isinstance(op, Stream))
    moved = ops[:stop - 2] + ops[stop:stop + 1] + ops[stop - 2:stop] + ops[stop + 1:]
    assert _walk(type(trace)(**{**vars(trace), "ops": tuple(moved)}))[1]


@functools.cache
def doubles() -> dict:
    """The released class allocating a resumed session's step without its draft slots: a
    waiting request that holds computed tokens and whose prompt grew since its last allocation
    (a streaming update took its outputs and new tokens into it) gets no
    `num_lookahead_tokens` (built on first use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")
    RequestStatus = load_attribute("vllm.v1.request:RequestStatus")
    released = KVCacheManager.allocate_slots
    signature = inspect.signature(released)

    class ResumedDraftsDropped(KVCacheManager):
        @functools.wraps(released)  # (its parameters, as the guard reads them)
        def allocate_slots(self, *args, **kwargs):
            bound = signature.bind(self, *args, **kwargs)
            request = bound.arguments["request"]
            # (its prompt grown since its last allocation: a streaming update, where a
            # connector's load resumes a request whose prompt is as it was)
            prompts = self.__dict__.setdefault("_prompts", {})
            grown = request.num_prompt_tokens > prompts.get(request.request_id,
                                                            request.num_prompt_tokens)
            prompts[request.request_id] = request.num_prompt_tokens
            if request.status == RequestStatus.WAITING and request.num_computed_tokens and \
                    grown:
                bound.arguments["num_lookahead_tokens"] = 0
            return released(*bound.args, **bound.kwargs)
    return {"ResumedDraftsDropped": ResumedDraftsDropped}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_streaming_drafts:...
    if name == "ResumedDraftsDropped":
        return doubles()[name]
    raise AttributeError(name)


DOUBLE = f"{__name__}:ResumedDraftsDropped"


@with_engine("vllm")
def test_a_manager_dropping_a_resumed_sessions_draft_slots_is_caught_at_the_resumption():
    """Caught on trace 1 (the released class clean there) at the resumption after an update
    (seed 0's first 30 scanned, 2026-12-06: 15 of them catch it, 1 the first)."""
    trace = streaming_drafts.GENERATOR.generate(0, 1)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, double("kvmanager", DOUBLE))
    assert found is not None
    calls = [line for line in found.report().splitlines() if line.strip().startswith("call")]
    assert calls and calls[0].split(None, 1)[1] == "allocate_slots(r5, 3) after a streaming " \
                                                   "update", found.report()


@with_engine("vllm")
@pytest.mark.parametrize("profile", ["streaming", "connector", "lookahead hashes"])
def test_no_nearby_profile_catches_it(profile):
    """The "streaming" profile resumes sessions with no draft slots to drop; "connector" resumes
    requests after their loads with draft slots, their prompts as they were; "lookahead hashes"
    has drafts and no sessions: their first 20 run the double clean (100, 30 and 60 scanned,
    2026-12-06)."""
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    generator = KVMANAGER.alone(profile).generator
    for index in range(20):
        assert divergence("kvmanager", generator.generate(0, index),
                          double("kvmanager", DOUBLE)) is None, (profile, index)


@with_engine("vllm")
def test_an_updates_images_left_out_of_the_engines_request_are_caught(monkeypatch):
    """The replay driver's vLLM request taking the updates without their images (as a scheduler
    dropping `StreamingUpdate.mm_features` would): trace 1 diverges at a block hash after the
    update (18 of the first 60 so, 2026-12-06), the released class clean there."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver

    trace = streaming_drafts.GENERATOR.generate(0, 1)
    assert any(isinstance(op, Stream) and op.images for op in trace.ops)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    released = KVManagerDriver.stream
    monkeypatch.setattr(KVManagerDriver, "stream", lambda self, rid, tokens, discard=False,
                        images=(): released(self, rid, tokens, discard))
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what.startswith("block hash"), found and found.report()
