"""The "async pipeline" profile (`strategies/kvmanager/async_pipeline.py`): "async outputs"
traces under vLLM's V2 model runner over two pipeline stages, so a request's back-to-back
prefill chunks have two steps in flight (the trace's `steps_in_flight` 2). Here (no vLLM): the
traces are the scheduler's shape; the released class runs the first 100 clean in CI
(`test_every_profile.py`, which wants the pipeline's edge classes), and the catalogue's
mutants wrong about tokens in flight are caught on them (vLLM). (A lock step wrong about the
steps in flight is the guard's to catch, against the engine's count: `test_guard_v2.py`.)"""

from __future__ import annotations

import pytest

from kvfuzz.strategies.kvmanager import async_outputs, async_pipeline
from kvfuzz.fuzz.kvmanager.async_ops import flown
from kvfuzz.strategies.kvmanager.trace import Placeholder, Preempt, Processed, Schedule
from tests.helpers import divergence, with_engine


def _two_in_flight(trace) -> int:
    """How many allocations (`schedule`, `placeholder`) of a request come with two steps of it
    in flight, as the lock step keeps them (`async_ops.flown`, a `processed` popping the
    oldest; refusals not told apart): what only a pipeline's traces make."""
    made, flights = 0, {}
    for op in trace.ops:
        held = flights.setdefault(getattr(op, "rid", None), [])
        if isinstance(op, Processed) and held:
            held.pop(0)
        elif isinstance(op, (Schedule, Placeholder)):
            made += len(held) >= 2
            flights[op.rid] = flown(held, 1, trace.steps_in_flight)
        elif isinstance(op, Preempt):
            flights[op.rid] = []
    return made


def test_the_profiles_traces_hold_two_steps_of_a_request_in_flight():
    traces = [async_pipeline.GENERATOR.generate(0, index) for index in range(40)]
    assert all(t.async_scheduling and t.steps_in_flight == 2 and
               t.note == "profile async pipeline" for t in traces)
    assert sum(_two_in_flight(t) > 0 for t in traces) >= 10


def test_the_check_fails_on_traces_of_one_step_in_flight():
    traces = [async_outputs.GENERATOR.generate(0, index) for index in range(40)]
    assert all(t.steps_in_flight == 1 for t in traces)
    assert sum(_two_in_flight(t) for t in traces) == 0


@with_engine("vllm")
@pytest.mark.parametrize("name", ["in_flight_ignored", "window_moves_early"])
def test_a_manager_wrong_about_tokens_in_flight_is_caught_on_the_profile(name):
    """Each caught on one of the profile's first 10 traces, which the released class runs
    clean."""
    traces = [async_pipeline.GENERATOR.generate(0, index) for index in range(10)]
    assert all(divergence("kvmanager", t, "vllm.kvmanager") is None for t in traces)
    assert any(divergence("kvmanager", t, f"mutant.vllm.kvmanager.{name}") is not None
               for t in traces)
