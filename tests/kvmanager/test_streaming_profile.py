"""The "streaming" profile (`strategies/kvmanager/streaming_input.py`): resumable (streaming-input)
requests under vLLM's synchronous scheduler, traces shaped as the guarded `Workload(streaming=...)`
sessions, so the lock step's `stream` op comes from kvfuzz's own generator. The released class
runs its traces clean (`test_every_profile.py`); here: the traces are the scheduler's shape (no
vLLM needed), and a catalogue mutant is caught on the profile's trace at a resumption after a
streaming update (slow: vLLM)."""

from __future__ import annotations

from collections import Counter

import pytest

from kvfuzz.strategies.kvmanager import scheduler_shape, streaming_input
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import (Arrive, Decode, Finish, Preempt, Sample,
                                               Schedule)
from kvfuzz.strategies.sources import TraceGenerator
from tests.helpers import divergence, walked, with_engine

KINDS = ("stop, waiting", "update after a wait", "update at the stop", "resumption",
         "end while waiting", "preempt")


def _walk(trace) -> tuple[Counter, list[str]]:
    """What the trace's resumable requests do, and what the synchronous scheduler never makes:
    a `stream` of a request not running, an update of a request not stopped, a request stopped
    and waiting scheduled or decoding before its update, an update taken and then decoding or
    preempted before its resumption (it waits, holding its blocks: not a victim)."""
    made, problems, state = Counter(), [], {}
    for index, op in enumerate(trace.ops):
        where, now = f"op {index} (r{getattr(op, 'rid', '-')})", state.get(getattr(op, "rid", -1))
        if isinstance(op, Arrive):
            state[op.rid] = "waiting"
        elif isinstance(op, Stream):
            if now == "paused" and op.tokens:
                made["update after a wait"] += 1
                state[op.rid] = "holding"
            elif now == "running":
                made["update at the stop" if op.tokens else "stop, waiting"] += 1
                state[op.rid] = "holding" if op.tokens else "paused"
            else:
                problems.append(f"{where}: stream of a request {now}")
        elif isinstance(op, Schedule):
            if now == "paused":
                problems.append(f"{where}: scheduled before its update")
            made["resumption"] += now == "holding"
            state[op.rid] = "running"
        elif isinstance(op, (Decode, Sample, Preempt)):
            if now in ("paused", "holding"):
                problems.append(f"{where}: {type(op).__name__.lower()} of a request {now}")
            made["preempt"] += isinstance(op, Preempt)
            if isinstance(op, Preempt):
                state[op.rid] = "waiting"
        elif isinstance(op, Finish):
            made["end while waiting"] += now in ("paused", "holding")
            state.pop(op.rid, None)
    return made, problems


def _traces(generator: TraceGenerator = streaming_input.GENERATOR, count: int = 40) -> list:
    return [generator.generate(0, index) for index in range(count)]


def test_the_profiles_traces_stop_update_and_resume_as_the_synchronous_scheduler_does():
    traces = _traces()
    assert all(t.note == "profile streaming" and not t.async_scheduling for t in traces)
    assert any(t.window for t in traces) and any(t.full_sequence_must_fit for t in traces)
    made = walked(traces, _walk)
    assert all(made[kind] for kind in KINDS), made


def test_the_checks_fail_on_traces_not_of_that_shape():
    """The checks above can fail: the scheduler profile makes no `stream` op; a generator
    whose resumptions come before the update (a paused request scheduled), or whose stopped
    requests go on decoding, is not the scheduler's shape."""
    plain = _traces(TraceGenerator("plain", scheduler_shape.build, 200, 200), 10)
    assert not any(_walk(t)[0][kind] for t in plain for kind in KINDS[:5])
    trace = next(t for t in _traces() if _walk(t)[0]["update after a wait"])
    ops = list(trace.ops)
    wait = next(i for i, op in enumerate(ops) if isinstance(op, Stream) and op.tokens and any(
        isinstance(o, Stream) and o.rid == op.rid and not o.tokens for o in ops[:i]))
    resumed = next(i for i in range(wait, len(ops)) if isinstance(ops[i], Schedule)
                   and ops[i].rid == ops[wait].rid)
    early = ops[:wait] + [ops[resumed]] + ops[wait:resumed] + ops[resumed + 1:]
    assert _walk(type(trace)(**{**vars(trace), "ops": tuple(early)}))[1]
    stop = next(i for i, op in enumerate(ops) if isinstance(op, Stream) and not op.tokens)
    decoding = ops[:stop + 1] + [Decode(ops[stop].rid, 1)] + ops[stop + 1:]
    assert _walk(type(trace)(**{**vars(trace), "ops": tuple(decoding)}))[1]


# Catalogue mutants the profile's traces reach at a resumption after a streaming update (a
# waiting request, so the scheduler's whole-request check and the watermark hold there), each
# caught on its trace `index` (which the released class runs clean) at that allocation: the
# whole-request check skipped, and the watermark kept on running requests instead of waiting
# ones (found 2026-12-06 scanning seed 0's first 160 traces of the profile).
AT_RESUMPTION = [("whole_request_unchecked", 12), ("watermark_for_running", 28)]


@with_engine("vllm")
@pytest.mark.parametrize("name, index", AT_RESUMPTION)
def test_a_mutant_the_profile_reaches_is_caught_at_a_resumption(name, index):
    trace = streaming_input.GENERATOR.generate(0, index)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, f"mutant.vllm.kvmanager.{name}")
    assert found is not None and found.what.startswith("None vs success"), \
        found and found.report()
    calls = [line for line in found.report().splitlines() if line.strip().startswith("call")]
    assert calls and calls[0].endswith("after a streaming update"), found.report()
