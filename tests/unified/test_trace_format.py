"""The unified trace format: the radix format's fields and ops with `components`, version-stable
JSON with one-line errors naming field and value, and a seeded generator that is the radix
generator's stream under a name of its own. Plain Python: nothing here needs SGLang."""

import json
import random

import pytest

from kvfuzz.impl.unified import IMPLEMENTATIONS
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.radix import generator as radix_generator
from kvfuzz.strategies.sources import seeded_random
from kvfuzz.strategies.unified import codec, generator, uniform
from kvfuzz.strategies.unified.profile import (CORES, KEEPS_KEY, KEEPS_MAMBA_VALUE, core_of,
                                              donor_of, host_of, mamba_of, swa_of,
                                              unsupported)
from kvfuzz.strategies.unified.trace import FORMAT, from_radix, resets_in_flight, to_json
from tests.helpers import dumps, loads


def test_generated_traces_round_trip_and_are_the_radix_stream_under_their_own_name():
    for index in range(20):
        trace = generator.generate(3, index)
        assert loads(dumps(trace)) == trace and loads(dumps(trace)).origin == trace.origin
        assert trace.origin.generator == "unified/1" and trace.components == "full"
        radix = radix_generator.build(seeded_random("unified/1", 3, index), 120)
        assert trace.ops == radix.ops and trace.policy == radix.policy


def test_the_released_entries_get_resets_with_requests_in_flight():
    """A lock from before a reset names a handle the new tree never mints again: in the
    unified cache's contract, so neither entry leaves such resets out."""
    assert all(not unsupported(impl.preconditions) for impl in IMPLEMENTATIONS)
    traces = [generator.generate(0, index) for index in range(100)]
    assert any(resets_in_flight(t) for t in traces)


def test_each_entry_declares_its_core_and_only_the_python_core_keeps_the_callers_key():
    declared = {impl.name: impl.preconditions for impl in IMPLEMENTATIONS
                if impl.kind == "upstream"}
    assert {name: core_of(p) for name, p in declared.items()} == {
        "sglang.unified.rust": "rust", "sglang.unified.python": "python",
        "sglang.unified.swa.rust": "rust", "sglang.unified.swa.python": "python",
        "sglang.unified.mamba.rust": "rust", "sglang.unified.mamba.python": "python",
        "sglang.unified.mamba.donor.rust": "rust", "sglang.unified.mamba.donor.python": "python",
        "sglang.unified.host.rust": "rust", "sglang.unified.host.python": "python"}
    for profile in ("", "swa.", "mamba.", "mamba.donor.", "host."):
        assert KEEPS_KEY in declared[f"sglang.unified.{profile}python"]
        assert KEEPS_KEY not in declared[f"sglang.unified.{profile}rust"]
    # both cores keep the caller's Mamba value, whatever the profile (it matters on Mamba traces)
    assert all(KEEPS_MAMBA_VALUE in p for p in declared.values())
    assert [name for name, p in declared.items() if swa_of(p)] == [
        "sglang.unified.swa.rust", "sglang.unified.swa.python"]
    assert [name for name, p in declared.items() if mamba_of(p)] == [
        "sglang.unified.mamba.rust", "sglang.unified.mamba.python",
        "sglang.unified.mamba.donor.rust", "sglang.unified.mamba.donor.python"]
    # the unified memory pool (the Full donor) is a Mamba profile of its own
    assert [name for name, p in declared.items() if donor_of(p)] == [
        "sglang.unified.mamba.donor.rust", "sglang.unified.mamba.donor.python"]
    # the host tier: each core (the Rust entry with the Python core beside it)
    assert [name for name, p in declared.items() if host_of(p)] == [
        "sglang.unified.host.rust", "sglang.unified.host.python"]
    assert KEEPS_KEY in declared["sglang.unified.host.python"]
    assert core_of(()) is None and set(CORES) == {"rust", "python"}


def test_bytes_feed_the_same_generator_and_never_fail():
    rng = random.Random(7)
    for _ in range(30):
        trace = generator.from_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(600))))
        assert 1 <= len(trace.ops) <= 200 and loads(dumps(trace)) == trace


def test_uniform_baseline_traces_are_valid():
    rng = random.Random(3)
    for _ in range(20):
        trace = uniform.uniform_trace(rng)
        assert codec.from_json(json.loads(json.dumps(to_json(trace)))) == trace


GOOD = {"format": FORMAT, "components": "full", "page_size": 4, "size": 64, "policy": "lru",
        "events": True, "ops": [{"op": "admit", "rid": 1, "tokens": [1, 2, 3], "prompt": 2},
                                {"op": "extend", "rid": 1, "count": 2}, {"op": "finish", "rid": 1}]}


@pytest.mark.parametrize("change, field, value", [
    ({"format": "kvfuzz-radix-trace/1"}, "format", "'kvfuzz-radix-trace/1'"),
    ({"components": "full+mla"}, "components", "'full+mla'"),
    ({"components": None}, "components", "None"),
    ({"page_size": 3}, "page_size", "3"),
    ({"policy": "tlru"}, "policy", "'tlru'"),
    ({"extra": 1}, "extra", "1"),
    ({"ops": [{"op": "admit", "rid": 1, "tokens": [1, 2], "prompt": 3}]}, "ops[0].prompt", "3"),
    ({"host_size": 8}, "host_size", "8"),  # only "full+host" components have one
    ({"components": "full+host"}, "host_size", "None"),
    ({"components": "full+host", "host_size": 8}, "ops[0].op", "'admit'"),  # tree ops only
    ({"host_policy": "write_through"}, "host_policy", "'write_through'"),
    ({"components": "full+host", "host_size": 8, "host_policy": "lazy"}, "host_policy",
     "'lazy'"),
])
def test_malformed_fields_are_one_line_errors_naming_the_field(change, field, value):
    with pytest.raises(FormatError) as error:
        codec.from_json({**GOOD, **change}, "unified.json")
    message = str(error.value)
    assert message.startswith(f"unified.json: field '{field}': ") and message.endswith(value)
    assert "\n" not in message


def test_a_radix_trace_reads_as_a_unified_one_with_the_same_content():
    trace = codec.from_json(GOOD)
    assert from_radix(trace) == trace and trace.describe().startswith("full components, ")
    assert to_json(trace)["format"] == FORMAT


def test_host_traces_round_trip_hold_tree_ops_and_reach_the_host_tier():
    """`unified-host/1`: tree ops over small device and host pools, for the host judge."""
    traces = [generator.HOST.generate(0, index) for index in range(30)]
    for trace in traces:
        assert loads(dumps(trace)) == trace and trace.components == "full+host"
        assert trace.origin.generator == "unified-host/1"
        assert 0 < trace.host_size <= 12 * trace.page_size
        assert {type(op).__name__ for op in trace.ops} <= {"Match", "Touch", "Pin", "Insert",
                                                            "Evict", "Reset"}
    assert {trace.host_policy for trace in traces} == {"write_back", "write_through"}
    assert "host_policy" not in to_json(traces[0]) or traces[0].host_policy != "write_back"
    assert generator.generator_for(frozenset(), host=True) is generator.HOST


def test_the_worst_input_is_the_radix_formats_and_under_1_mb():
    worst = codec.worst_input()
    assert len(json.dumps(worst)) < 2**20 and len(worst["ops"]) == codec.MAX_OPS
    assert codec.from_json(worst).components == "full"
