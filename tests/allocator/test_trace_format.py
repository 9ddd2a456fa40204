"""The allocator trace format: version-stable JSON, one-line errors naming field and value, and a
seeded generator that never changes silently."""

import pytest

from kvfuzz.strategies.allocator.codec import from_json
from tests.helpers import loads
from kvfuzz.impl.allocator import PAGED, TOKEN
from kvfuzz.strategies.allocator.generator import generate as generate_trace
from kvfuzz.strategies.allocator.generator import generator_for
from kvfuzz.strategies.allocator.trace import FORMAT, Admit, Extend, Trace, to_json
from tests.helpers import dumps
from kvfuzz.strategies.inputs import FormatError


def test_generated_traces_round_trip_and_have_at_least_200_ops():
    for index in range(30):
        trace = generate_trace(3, index)
        assert len(trace.ops) >= 200
        assert loads(dumps(trace)) == trace and loads(dumps(trace)).origin == trace.origin


def test_generator_allocator_3_is_pinned():
    # A change here means the generator changed: bump NAME ("allocator/4"), then re-pin.
    pinned = [("36622f03efc56435", 4, 1252), ("c914351f0698b490", 1, 4),
              ("8e0db0de7875d696", 2, 64)]
    assert [(t.trace_id(), t.page_size, t.size)
            for t in map(lambda i: generate_trace(0, i), range(3))] == pinned


@pytest.mark.parametrize("preconditions, name, pinned", [
    (PAGED, "allocator/3[P>=2,no-release-checks,checks-after-release]",
     [("dadcfe907c5e71c0", 2, 26), ("270e953aa679b485", 16, 214)]),
    (TOKEN, "allocator/3[token,no-release-checks]", [("684a33c16c287a22", 1, 9),
                                                     ("7a1161c00ede27eb", 1, 268)]),
])
def test_the_generators_of_declared_preconditions_are_pinned(preconditions, name, pinned):
    generator = generator_for(tuple(sorted(preconditions)))
    assert generator.name == name
    assert [(t.trace_id(), t.page_size, t.size)
            for t in map(lambda i: generator.generate(0, i), range(2))] == pinned


def test_generated_traces_reach_the_edges_they_aim_at():
    traces = [generate_trace(0, index) for index in range(200)]
    assert {t.page_size for t in traces} >= {1, 2, 4, 8, 16}
    assert {t.need_sort for t in traces} == {True, False}
    assert any(t.debug and any(type(op).__name__ == "Misuse" for op in t.ops) for t in traces)
    kinds = {op.kind for t in traces for op in t.ops if type(op).__name__ == "Misuse"}
    assert {"group_begin_nested", "group_end_unopened", "double_free", "segment_unaligned",
            "segment_gapped", "alloc_unaligned"} <= kinds
    assert any(t.size // t.page_size > 256 and t.debug for t in traces)
    fills = {op.fill for t in traces for op in t.ops if isinstance(op, Extend)}
    assert {-1, 0, 1} <= fills


GOOD = {"format": FORMAT, "page_size": 4, "size": 64, "need_sort": False, "debug": False,
        "ops": [{"op": "admit", "rid": 1}, {"op": "extend", "rids": [1], "lens": [5]}]}


@pytest.mark.parametrize("change, field, value", [
    ({"format": "kvfuzz-case/1"}, "format", "'kvfuzz-case/1'"),
    ({"colour": 1}, "colour", "1"),
    ({"page_size": 0}, "page_size", "0"),
    ({"need_sort": "no"}, "need_sort", "'no'"),
    ({"ops": {}}, "ops", "{}"),
    ({"ops": [{"op": "steal"}]}, "ops[0].op", "'steal'"),
    ({"ops": [{"op": "admit"}]}, "ops[0].rid", "None"),
    ({"ops": [{"op": "admit", "rid": -1}]}, "ops[0].rid", "-1"),
    ({"ops": [{"op": "extend", "rids": [1, "2"], "lens": [1, 1]}]}, "ops[0].rids[1]", "'2'"),
    ({"ops": [{"op": "extend", "rids": [1, 2], "lens": [1]}]}, "ops[0].lens", "(1,)"),
    ({"ops": [{"op": "finish", "rid": 1, "how": "evict"}]}, "ops[0].how", "'evict'"),
    ({"ops": [{"op": "alloc", "rid": 1, "pages": -1}]}, "ops[0].pages", "-1"),
    ({"ops": [{"op": "clear", "when": 3}]}, "ops[0].when", "3"),
    ({"interface": "tokens"}, "interface", "'tokens'"),
    ({"interface": "token"}, "page_size", "4"),
    ({"ops": [{"op": "misuse", "kind": "group_end_twice"}]}, "ops[0].kind", "'group_end_twice'"),
])
def test_malformed_traces_name_the_field_and_the_value(change, field, value):
    with pytest.raises(FormatError) as error:
        from_json({**GOOD, **change}, source="t.json")
    assert f"t.json: field '{field}'" in str(error.value) and value in str(error.value)


def test_a_hand_written_trace_decodes():
    trace = from_json(GOOD)
    assert trace == Trace(4, 64, False, (Admit(1), Extend((1,), (5,))))
    assert "interface" not in to_json(trace)  # "paged", the default: older ids stay the same
    token = from_json({**GOOD, "page_size": 1, "size": 8, "interface": "token"})
    assert token.interface == "token" and to_json(token)["interface"] == "token"
    assert to_json(trace)["ops"][1] == {"op": "extend", "rids": [1], "lens": [5], "fill": None,
                                        "trim": 0, "exact": False}
