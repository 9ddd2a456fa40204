"""The trace's `steps_in_flight` (a pipeline's steps of a request in flight: vLLM's V2 model
runner over several stages; docs/upstream-vllm.md, "vLLM's V2 model runner under a pipeline"):
the setting read and written backward compatibly, and the lock step's queue of steps in flight
(`async_ops.flown`, `processed` popping the oldest), identical to the single step in flight with
the default. The guarded sessions: `test_guard_v2.py` (vLLM)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfuzz.fuzz.kvmanager.async_ops import Flights, flown
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.trace import Trace, to_json

HEADER = Trace(60, 16, 48, 1024, (), async_scheduling=True)


def test_steps_in_flight_is_written_only_past_one_and_read_back():
    assert "steps_in_flight" not in to_json(HEADER)
    assert from_json(to_json(HEADER)).steps_in_flight == 1  # an older file reads as before
    piped = replace(HEADER, steps_in_flight=2)
    assert to_json(piped)["steps_in_flight"] == 2 and from_json(to_json(piped)) == piped
    assert "2 steps in flight" in piped.describe()


@pytest.mark.parametrize("fields, match", [({"steps_in_flight": 2, "async_scheduling": False},
                                             "without asynchronous scheduling"),
                                            ({"steps_in_flight": 0}, "steps_in_flight"),
                                            ({"steps_in_flight": 5}, "steps_in_flight")])
def test_steps_in_flight_needs_the_asynchronous_scheduler_and_a_few_stages(fields, match):
    data = to_json(HEADER) | fields
    with pytest.raises(FormatError, match=match):
        from_json(data)


def test_one_step_in_flight_is_the_last_allocations_alone_as_before():
    assert flown([], 13, 1) == [13] and flown([13], 62, 1) == [62] and flown([13], 0, 1) == []


def test_a_pipeline_keeps_its_last_steps_oldest_first():
    assert flown([13], 62, 2) == [13, 62] and flown([13, 62], 61, 2) == [62, 61]
    assert flown([62], 0, 2) == [62]  # (an allocation of a hit alone adds no step)
    request = Flights()
    request.flights = [13, 62]
    assert request.in_flight == 75
    request.in_flight = 0  # (a preemption, a load: none in flight)
    assert request.flights == [] and request.in_flight == 0
