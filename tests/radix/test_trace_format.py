"""The radix trace format: version-stable JSON, one-line errors naming field and value, a seeded
generator (and its byte-fed twin) that reaches what it aims at, and what a declaration leaves
out. Plain Python: nothing here needs SGLang."""

import dataclasses
import json
import random

import pytest

from kvfuzz.impl.radix import UPSTREAM_DECLARES
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.radix import codec, generator, uniform
from kvfuzz.strategies.radix.profile import (NO_PRIORITIES, NO_RESET_IN_FLIGHT, broken,
                                             unsupported)
from kvfuzz.strategies.radix.trace import (FORMAT, PRIORITIES, Admit, Finish, Insert, Reset,
                                           Trace, prioritized, resets_in_flight, to_json)
from kvfuzz.strategies.sources import seeded_random
from tests.helpers import dumps, loads


def test_generated_traces_round_trip():
    for index in range(30):
        trace = generator.generate(3, index)
        assert len(trace.ops) == 120
        assert loads(dumps(trace)) == trace and loads(dumps(trace)).origin == trace.origin


def test_generated_traces_reach_the_edges_they_aim_at():
    traces = [generator.generate(0, index) for index in range(200)]
    assert {t.page_size for t in traces} == {1, 2, 4, 8, 16}
    assert {t.policy for t in traces} == set(codec.POLICIES) and {t.events for t in traces} \
        == {True, False}
    kinds = {type(op).__name__ for t in traces for op in t.ops}
    assert kinds == {"Admit", "Extend", "Checkpoint", "Finish", "Match", "Touch", "Pin",
                     "Insert", "Evict", "Reset"}
    prompts = [(t.page_size, op.prompt) for t in traces for op in t.ops
               if isinstance(op, Admit) and t.page_size > 1]
    assert {p % ps for ps, p in prompts} >= {0, 1} and any(p % ps == ps - 1 for ps, p in prompts)
    assert any(resets_in_flight(t) for t in traces)
    assert any(op.ns for t in traces for op in t.ops if isinstance(op, Admit))


def test_a_declared_precondition_gets_its_own_stream_without_resets_in_flight():
    declared = generator.generator_for(unsupported(UPSTREAM_DECLARES))
    assert declared.name == "radix/2[no reset with requests in flight]"
    traces = [declared.generate(0, index) for index in range(100)]
    assert not any(resets_in_flight(t) for t in traces)
    assert any(isinstance(op, Reset) for t in traces for op in t.ops)
    in_flight = Trace(1, 8, "lru", False, (Admit(1, (1, 2), 2), Reset(), Finish(1)))
    assert resets_in_flight(in_flight) == 1
    assert broken(in_flight, UPSTREAM_DECLARES) == [NO_RESET_IN_FLIGHT]
    assert broken(in_flight, ()) == []
    idle = Trace(1, 8, "lru", False, (Admit(1, (1, 2), 2), Finish(1), Reset()))
    assert resets_in_flight(idle) == 0 and broken(idle, UPSTREAM_DECLARES) == []


def test_a_pass_without_priorities_is_the_same_build_with_every_priority_0():
    """The history entry behind finding Q (`sglang.radix.pure_swa.unprioritized`): its stream
    leaves priorities out and nothing else, and a prioritized trace is outside its contract."""
    def zeroed(op):
        return dataclasses.replace(op, priority=0) if hasattr(op, "priority") else op

    stream = generator.generator_for(unsupported(UPSTREAM_DECLARES + (NO_PRIORITIES,)))
    assert stream.name == "radix/2[no priorities,no reset with requests in flight]"
    without = generator.ALL_MISUSE - {PRIORITIES}
    had = 0
    for index in range(60):
        full = generator.build(seeded_random("radix/2", 0, index), 120, long_prompts=True)
        bare = generator.build(seeded_random("radix/2", 0, index), 120, allowed=without,
                               long_prompts=True)
        assert bare.ops == tuple(zeroed(op) for op in full.ops), index
        assert not prioritized(bare)
        had += bool(prioritized(full))
    assert had > 30  # the pass does leave something out
    trace = Trace(1, 8, "lru", False, (Insert((1, 2), 0, 2),))
    assert broken(trace, (NO_PRIORITIES,)) == [NO_PRIORITIES] and broken(trace, ()) == []


def test_bytes_feed_the_same_generator_and_never_fail():
    rng = random.Random(7)
    for _ in range(50):
        trace = generator.from_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(600))))
        assert 1 <= len(trace.ops) <= 200 and loads(dumps(trace)) == trace
    assert generator.from_bytes(b"") == generator.from_bytes(b"\0" * 10)


def test_uniform_baseline_traces_are_valid():
    rng = random.Random(3)
    for _ in range(20):
        trace = uniform.uniform_trace(rng)
        assert codec.from_json(json.loads(json.dumps(to_json(trace)))) == trace


GOOD = {"format": FORMAT, "page_size": 4, "size": 64, "policy": "lru", "events": True,
        "ops": [{"op": "admit", "rid": 1, "tokens": [1, 2, 3], "prompt": 2},
                {"op": "extend", "rid": 1, "count": 2}, {"op": "finish", "rid": 1}]}


@pytest.mark.parametrize("change, field, value", [
    ({"format": "kvfuzz-mamba-trace/1"}, "format", "'kvfuzz-mamba-trace/1'"),
    ({"page_size": 3}, "page_size", "3"),
    ({"page_size": 128}, "page_size", "128"),
    ({"size": 62}, "size", "62"),
    ({"size": 2**12}, "size", "4096"),
    ({"policy": "tlru"}, "policy", "'tlru'"),
    ({"events": 1}, "events", "1"),
    ({"extra": 1}, "extra", "1"),
    ({"ops": [{"op": "admit", "rid": 1, "tokens": [1, 2], "prompt": 3}]}, "ops[0].prompt", "3"),
    ({"ops": [{"op": "admit", "rid": 1, "tokens": [1, 2], "prompt": 0}]}, "ops[0].prompt", "0"),
    ({"ops": [{"op": "admit", "rid": 1, "tokens": [-1], "prompt": 1}]}, "ops[0].tokens[0]",
     "-1"),
    ({"ops": [{"op": "admit", "rid": 1, "tokens": [1] * 1025, "prompt": 1}]}, "ops[0].tokens",
     "1025"),
    ({"ops": [{"op": "match", "tokens": [1], "ns": 4}]}, "ops[0].ns", "4"),
    ({"ops": [{"op": "insert", "tokens": [1], "priority": 2**21}]}, "ops[0].priority",
     "2097152"),
    ({"ops": [{"op": "evict", "count": -1}]}, "ops[0].count", "-1"),
    ({"ops": [{"op": "finish", "rid": 1, "cache": "yes"}]}, "ops[0].cache", "'yes'"),
    ({"ops": [{"op": "reset", "rid": 1}]}, "ops[0].rid", "1"),
    ({"ops": [{"op": "shrink"}]}, "ops[0].op", "'shrink'"),
])
def test_malformed_fields_are_one_line_errors_naming_the_field(change, field, value):
    with pytest.raises(FormatError) as error:
        codec.from_json({**GOOD, **change}, "radix.json")
    message = str(error.value)
    assert message.startswith(f"radix.json: field '{field}': ") and message.endswith(value)
    assert "\n" not in message


def test_a_relative_eviction_may_ask_for_fewer_than_the_evictable_tokens():
    trace = codec.from_json({**GOOD, "ops": [{"op": "evict", "count": -3, "relative": True}]})
    assert trace.ops[0].count == -3 and trace.ops[0].relative


def test_the_worst_input_is_at_the_limits_and_under_1_mb():
    worst = codec.worst_input()
    assert len(json.dumps(worst)) < 2**20 and len(worst["ops"]) == codec.MAX_OPS
    trace = codec.from_json(worst)
    assert trace.size == codec.MAX_SIZE
    assert max(len(op.tokens) for op in trace.ops if isinstance(op, Admit)) == codec.MAX_TOKENS
