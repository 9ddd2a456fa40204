"""The offload trace format: version-stable JSON, one-line errors naming the field and the
value, the pinned seeded generator and its byte-fed twin, the uniform baseline, each policy's
stream for what the released manager declares, and events left pending at a reset found
without running anything. No vLLM needed."""

import random

import pytest

from kvfuzz.impl.offload import IMPLEMENTATIONS, declares
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.offload.codec import from_json
from kvfuzz.strategies.offload.generator import from_bytes, generate, generator_for
from kvfuzz.strategies.offload.profile import EVENTS_DRAINED, broken
from kvfuzz.strategies.offload.trace import (FORMAT, CompleteStore, Events, New, Reset, Store,
                                             Trace, events_pending_at_reset, request_keys)
from kvfuzz.strategies.offload.uniform import uniform_trace
from tests.helpers import dumps, loads

PINNED = [("8651bc0dd8f995c3", "arc", 24), ("7b572cacbf0b6451", "arc", 12)]


def test_generated_traces_round_trip_and_are_pinned():
    traces = [generate(0, index) for index in range(30)]
    for trace in traces[:10]:
        assert loads(dumps(trace)) == trace and len(trace.ops) == 200
    assert {t.policy for t in traces} == {"lru", "arc"} and {t.groups for t in traces} == {1, 2}
    assert 0 in {t.chunks for t in traces}  # a pool of no chunks (CPU bytes below one chunk)
    # A change here means the generator changed: bump NAME ("offload/3"), then re-pin.
    assert [(t.trace_id(), t.policy, t.chunks) for t in traces[:2]] == PINNED


def test_each_released_entry_gets_its_policy_s_stream_with_events_drained():
    for policy in ("lru", "arc"):
        stream = generator_for(frozenset(declares(policy)))
        assert stream.name == f"offload/2[{policy} only, events drained]"
        traces = [stream.generate(0, i) for i in range(40)]
        assert {t.policy for t in traces} == {policy}
        assert not any(events_pending_at_reset(t) for t in traces)
        assert any(isinstance(op, Reset) for t in traces for op in t.ops)
    assert {impl.name for impl in IMPLEMENTATIONS if impl.default} == {"vllm.offload.lru",
                                                                       "vllm.offload.arc"}


def test_events_pending_at_a_reset_are_found_and_outside_the_released_contract():
    ops = (New(1, (1,)), Store(1, 0, 1), CompleteStore(1), Reset())
    trace = Trace("lru", 4, 1, True, 1, 8, ops)
    assert events_pending_at_reset(trace)
    assert not events_pending_at_reset(Trace("lru", 4, 1, True, 1, 8, ops[:3] + (Events(),
                                                                                  Reset())))
    assert not events_pending_at_reset(Trace("lru", 4, 1, False, 1, 8, ops))  # events off
    assert broken(trace, declares("lru")) == [EVENTS_DRAINED]
    assert broken(trace, declares("arc")) == ["cache_policy 'arc' only", EVENTS_DRAINED]
    assert broken(trace, ()) == []


def test_the_byte_fed_twin_and_the_uniform_baseline_make_valid_traces():
    rng = random.Random(5)
    for _ in range(20):
        for trace in (from_bytes(rng.randbytes(rng.randint(0, 600))), uniform_trace(rng)):
            assert loads(dumps(trace)) == trace and 1 <= len(trace.ops) <= 200
    assert from_bytes(b"").ops  # bytes run out: the simplest choices, still a trace


def test_a_request_s_keys_go_group_by_group():
    assert request_keys((7, 8, 9), 2, 1, 3) == [(8, 0), (9, 0), (8, 1), (9, 1)]


GOOD = {"format": FORMAT, "policy": "arc", "chunks": 4, "groups": 1, "events": True,
        "store_threshold": 1, "tracker_size": 8,
        "ops": [{"op": "new", "rid": 1, "hashes": [3, 4]},
                {"op": "store", "rid": 1, "start": 0, "stop": 2}]}


@pytest.mark.parametrize("change, field, value", [
    ({"format": "kvfuzz-blockpool-trace/1"}, "format", "'kvfuzz-blockpool-trace/1'"),
    ({"policy": "fifo"}, "policy", "'fifo'"),
    ({"chunks": -1}, "chunks", "-1"),
    ({"groups": 5}, "groups", "5"),
    ({"events": 1}, "events", "1"),
    ({"store_threshold": 0}, "store_threshold", "0"),
    ({"tracker_size": -1}, "tracker_size", "-1"),
    ({"blocks": 3}, "blocks", "3"),
    ({"ops": [{"op": "new", "rid": 1, "hashes": [3, 3]}]}, "ops[0].hashes", "[3, 3]"),
    ({"ops": [{"op": "new", "rid": 1, "hashes": [2**63]}]}, "ops[0].hashes[0]",
     "9223372036854775808"),
    ({"ops": [{"op": "store", "rid": 1, "start": 3, "stop": 2}]}, "ops[0].stop", "2"),
    ({"ops": [{"op": "complete_store", "rid": 1, "success": "no"}]}, "ops[0].success",
     "'no'"),
    ({"ops": [{"op": "touch", "rid": 1, "start": 0}]}, "ops[0].stop", "None"),
    ({"ops": [{"op": "evict"}]}, "ops[0].op", "'evict'"),
])
def test_malformed_traces_name_the_field_and_the_value(change, field, value):
    with pytest.raises(FormatError) as error:
        from_json({**GOOD, **change}, source="o.json")
    assert f"o.json: field '{field}'" in str(error.value) and value in str(error.value)
    assert "\n" not in str(error.value)
