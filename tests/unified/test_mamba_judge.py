"""The Mamba profile's parts without SGLang: the oracle's facts of the Mamba component (where a match
ends, its branching point, the state pool) on worked examples, each judge check on a hand-made
snapshot of a correct tree and of one broken the way it looks for (a test double only that check
catches), the cores' Mamba state compared, the trace format's `mamba_slots` and tree-ops-only
rule, and the profile's pinned generator."""

from copy import deepcopy

import pytest

from kvfuzz.fuzz.unified.mamba_state import insert_problems, mamba_problems, match_problems
from kvfuzz.fuzz.unified.state import views
from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.fuzz.unified.twin import state_problems
from kvfuzz.impl.registry import UPSTREAM, Implementation
from kvfuzz.oracle.unified.mamba import (accepted_length, branching_seqlen, checkpoint_grid,
                                         pool_problems)
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.unified.codec import from_json
from kvfuzz.strategies.unified.profile import MAMBA_COMPONENT
from kvfuzz.strategies.unified.trace import TREE_OPS, mamba_chunk, to_json


def test_a_match_ends_at_the_deepest_state_on_its_full_hit():
    assert accepted_length([(4, False), (4, True), (2, False)]) == 8
    assert accepted_length([(4, False), (4, False)]) == 0  # no state: no hit at all
    assert accepted_length([(4, True), (4, False), (4, True)]) == 12


@pytest.mark.parametrize("full, matched, grid, expected", [
    (6, 0, 4, 4),      # the full hit floored to the grid, past the match
    (8, 8, 4, None),   # the match already ends on the grid point
    (3, 0, 4, None),   # nothing on the grid past 0
    (16, 4, 8, 16),
])
def test_the_branching_point_is_the_full_hit_on_the_grid_past_the_match(full, matched, grid,
                                                                        expected):
    assert branching_seqlen(full, matched, grid) == expected


def test_the_grid_is_the_chunk_and_the_page_together():
    assert [checkpoint_grid(mamba_chunk(page), page) for page in (1, 2, 4, 8)] == [4, 4, 4, 8]


def test_the_state_pool_is_conserved_with_its_sign():
    assert pool_problems([1, None, 3], [2, 4], 4, 2) == []
    assert "1 lost" in pool_problems([1, None], [2, 4], 4, 2)[0]
    assert any("two nodes" in p for p in pool_problems([1, 1], [2, 3, 4], 4, 3))
    assert any("both in the tree and free" in p for p in pool_problems([1, 3], [2, 3, 4], 4, 3))


def snapshot() -> dict:
    """A page-size-1 tree: [1 2] (no state: a split's upper node) -> [1 2 3 4] (state 2) and
    -> [1 2 5] (state 1), in a pool of 3 states; 8 full slots, 3 free."""
    return {"nodes": [(-1, None, [1, 2], 0, [1, 2], 2), (0, None, [1, 2, 3, 4], 2, [3, 4], 0),
                      (0, None, [1, 2, 5], 2, [5], 0)],
            "inner": None, "unlocked": [1, 2, 3, 4, 5], "walk": [],
            "evictable": 5, "protected": 0, "total": [5, 2], "available": 3, "free": [6, 7, 8],
            "rows": {}, "aliases": [], "events": [], "swa": None,
            "mamba": {"states": [None, [2], [1]], "free": [3], "available": 1, "capacity": 3,
                      "evictable": 2, "protected": 0}}


ENDS = {(0, (1, 2, 3, 4)), (0, (1, 2, 5))}  # namespace 0: no extra key


def check(snap) -> list:
    return mamba_problems(snap, views(snap, 1), ENDS)


def broken(change) -> dict:
    snap = deepcopy(snapshot())
    change(snap)
    return snap


def test_a_correct_mamba_tree_has_no_problem():
    assert check(snapshot()) == []


@pytest.mark.parametrize("change, label, text", [
    (lambda s: s["mamba"].update(free=[], available=0), "mamba pool", "1 lost"),
    (lambda s: s["mamba"]["states"].__setitem__(2, [2]), "mamba pool", "in two nodes"),
    (lambda s: s["mamba"].update(evictable=3), "mamba sizes", "1 counted twice"),
    (lambda s: s["mamba"].update(evictable=1, protected=1), "mamba sizes", "with no lock held"),
    (lambda s: s.update(total=[5, 3]), "total_size", "hold 5 full slots and 2 Mamba states"),
    (lambda s: s["mamba"].update(states=[[3], [2], [1]], free=[], available=0, evictable=3),
     "mamba state", "node [1 2] holds a Mamba state, and no insert ended there"),
])
def test_each_mamba_check_catches_its_broken_state(change, label, text):
    problems = check(broken(change))
    assert [p for p in problems if p[0] == label and text in p[1]], problems


def test_a_match_and_an_insert_are_judged_against_the_states():
    snap = snapshot()
    nodes, states = views(snap, 1), snap["mamba"]["states"]
    assert match_problems(nodes, states, 0, (1, 2, 3, 4, 9), 4, None, 4) == []
    assert match_problems(nodes, states, 0, (1, 2, 3), 0, None, 4) == []  # [1 2]: no state
    found = match_problems(nodes, states, 0, (1, 2, 3, 4), 2, None, 4)
    assert found and found[0][0] == "mamba match" and found[0][1].endswith("ends at 4")
    found = match_problems(nodes, states, 0, (1, 2, 3, 4), 4, 4, 4)  # ends on the grid
    assert found and found[0][0] == "mamba branching" and "expected None" in found[0][1]
    assert insert_problems(nodes, states, 0, (1, 2, 5), True, True) == []
    assert insert_problems(nodes, states, 0, (1, 2, 5), False, None) == []  # unknown before
    assert "answered mamba_exist=False" in insert_problems(nodes, states, 0, (1, 2, 5), False,
                                                           True)[0][1]
    assert "left no Mamba state" in insert_problems(nodes, states, 0, (1, 2), False, False)[0][1]


def test_the_cores_mamba_state_is_compared():
    rust = snapshot()
    assert state_problems(rust, deepcopy(rust)) == []
    python = broken(lambda s: s["mamba"]["states"].reverse())
    assert any("mamba" in text for _, text in state_problems(rust, python))


MAMBA = Implementation("double", "unified", "x:Y", "test double", UPSTREAM,
                       preconditions=(MAMBA_COMPONENT,))


def test_the_mamba_stream_is_pinned_and_holds_tree_ops_only():
    traces = [UNIFIED.generator.generate(0, index, [MAMBA]) for index in range(3)]
    assert [UNIFIED.codec.input_id(t) for t in traces] == PINNED
    assert {t.origin.generator for t in traces} == {"unified-mamba/1"}
    assert all(t.components == "full+mamba" and t.mamba_slots >= 2 and t.window == 0 and
               all(isinstance(op, TREE_OPS) for op in t.ops) for t in traces)


PINNED = ["c249791d7bb39e29", "b01f27c0298397bf", "26c1149ad6fa6a68"]


def test_mamba_slots_are_read_and_refused_in_one_line():
    trace = UNIFIED.generator.generate(0, 0, [MAMBA])
    assert from_json(to_json(trace)) == trace and "window" not in to_json(trace)
    full = to_json(UNIFIED.generator.generate(0, 0))
    admit = {"op": "admit", "rid": 1, "tokens": [1, 2], "prompt": 2}
    for data, field in (({**to_json(trace), "mamba_slots": 0}, "mamba_slots"),
                        ({**full, "mamba_slots": 4}, "mamba_slots"),
                        ({**to_json(trace), "window": 4}, "window"),
                        ({**to_json(trace), "ops": [admit]}, "ops[0].op")):
        with pytest.raises(FormatError) as error:
            from_json(data, "t.json")
        assert f"field '{field}'" in str(error.value) and "\n" not in str(error.value)
