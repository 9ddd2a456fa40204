"""The Mamba oracle on worked examples (upstream MambaSlotAllocator's source is the contract), its
invariants on broken states, and the trace format: version-stable JSON, one-line errors, a
pinned generator, and group-protocol misuse found without running anything."""

import pytest

from kvfuzz.impl.mamba import UPSTREAM_DECLARES
from kvfuzz.oracle.mamba.model import MambaModel, new_slot_violations, state_violations
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.mamba.codec import from_json
from tests.helpers import loads
from kvfuzz.strategies.mamba.generator import generate, generator_for
from kvfuzz.strategies.mamba.profile import broken, unsupported
from kvfuzz.strategies.mamba.trace import (CLEAR_IN_GROUP, FORMAT, NESTED, STRAY_END, Admit, Clear,
                                           GroupBegin, GroupEnd, Trace, protocol_misuse)
from tests.helpers import dumps


def test_slots_come_from_the_head_and_go_back_to_the_tail_slot_0_never():
    model = MambaModel(5)
    assert model.alloc(2) == [1, 2] and model.alloc(4) is None and model.free == [3, 4, 5]
    model.free_slots([2, 1])
    assert model.free == [3, 4, 5, 2, 1] and model.available_size() == 5
    assert model.alloc(5) == [3, 4, 5, 2, 1] and model.alloc(1) is None


def test_a_group_pre_allocates_and_its_unused_slots_go_back_at_the_end():
    model = MambaModel(6)
    model.group_begin(3)
    assert model.free == [4, 5, 6] and model.available_size() == 3
    assert model.alloc(1) == [1] and model.alloc(2) == [4, 5] and model.alloc(1) == [2]
    model.group_end()
    assert model.free == [6, 3] and not model.open
    model.group_end()  # a stray end does nothing
    assert model.free == [6, 3]


def test_a_group_that_cannot_pre_allocate_serves_from_the_free_list():
    model = MambaModel(2)
    model.group_begin(3)
    assert model.pending == [] and model.open and model.alloc(1) == [1]


def test_a_nested_begin_or_a_clear_ends_the_open_group_first():
    model = MambaModel(4)
    model.group_begin(2)
    model.group_begin(1)  # the first group's slots 1, 2 go back before slot 3 is taken
    assert model.free == [4, 1, 2] and model.pending == [3]
    model.clear()
    assert model.free == [1, 2, 3, 4] and model.pending == [] and not model.open
    assert model.alloc(1) == [1]


def test_the_invariants_name_what_is_wrong():
    assert state_violations(4, [3, 4], [1], {2: 7}) == []
    found = " | ".join(state_violations(4, [0, 3, 3], [], {2: 7}))
    assert "slot 0" in found and "twice" in found and "lost" in found and "[1, 4]" in found
    assert "held by r7" in " ".join(state_violations(4, [1, 2, 3, 4], [], {2: 7}))
    problems = new_slot_violations(9, [0, 2, 2], 4, {2: 7})
    assert any("outside 1..4" in p for p in problems) and any("held by r7" in p for p in problems)
    assert any("twice" in p for p in problems)


def test_protocol_misuse_is_found_statically_and_preconditions_rule_it_out():
    ops = (GroupEnd(), GroupBegin(1), GroupBegin(1), Admit(1), Clear(), GroupBegin(0), GroupEnd())
    trace = Trace(4, ops)
    assert protocol_misuse(trace) == {STRAY_END, NESTED, CLEAR_IN_GROUP}
    assert unsupported(UPSTREAM_DECLARES) == {NESTED, CLEAR_IN_GROUP}
    assert len(broken(trace, UPSTREAM_DECLARES)) == 2 and broken(trace, ()) == []
    upstream = generator_for(unsupported(UPSTREAM_DECLARES))
    assert upstream.name == "mamba/1[no clear in a group,no nested group begin]"
    assert all(protocol_misuse(upstream.generate(0, i)) <= {STRAY_END} for i in range(50))


def test_generated_traces_round_trip_reach_the_misuse_and_are_pinned():
    traces = [generate(0, index) for index in range(40)]
    for trace in traces[:10]:
        assert loads(dumps(trace)) == trace and len(trace.ops) == 200
    assert set().union(*map(protocol_misuse, traces)) == {NESTED, CLEAR_IN_GROUP, STRAY_END}
    # A change here means the generator changed: bump NAME ("mamba/2"), then re-pin.
    assert [(t.trace_id(), t.size) for t in traces[:2]] == PINNED


PINNED = [("a5eeb8ffc56969ec", 7), ("f229085b3cbb83a7", 3)]


GOOD = {"format": FORMAT, "size": 8, "ops": [{"op": "admit", "rid": 1},
                                             {"op": "group_begin", "count": 2}]}


@pytest.mark.parametrize("change, field, value", [
    ({"format": "kvfuzz-allocator-trace/1"}, "format", "'kvfuzz-allocator-trace/1'"),
    ({"size": 0}, "size", "0"),
    ({"slots": 3}, "slots", "3"),
    ({"ops": [{"op": "admit"}]}, "ops[0].rid", "None"),
    ({"ops": [{"op": "alloc", "rid": 1, "count": -1}]}, "ops[0].count", "-1"),
    ({"ops": [{"op": "finish", "rids": [1, "x"]}]}, "ops[0].rids[1]", "'x'"),
    ({"ops": [{"op": "group_begin", "count": 1, "relative": "yes"}]}, "ops[0].relative", "'yes'"),
    ({"ops": [{"op": "evict"}]}, "ops[0].op", "'evict'"),
])
def test_malformed_traces_name_the_field_and_the_value(change, field, value):
    with pytest.raises(FormatError) as error:
        from_json({**GOOD, **change}, source="m.json")
    assert f"m.json: field '{field}'" in str(error.value) and value in str(error.value)
