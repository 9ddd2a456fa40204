"""The SWA profile's parts without SGLang: the oracle's facts of the SWA component (a match's
window, a checkpoint's out-of-window cursor) on worked examples, each judge check on a hand-made
snapshot of a correct SWA tree and of one broken the way it looks for (a test double only that
check catches), the Rust core against the Python core on SWA state, the trace format's window
and the profile's generator."""

from copy import deepcopy

import pytest

from kvfuzz.fuzz.unified.state import views
from kvfuzz.fuzz.unified.swa_state import match_problems, swa_problems
from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.fuzz.unified.twin import state_problems
from kvfuzz.impl.registry import UPSTREAM, Implementation
from kvfuzz.oracle.unified.swa import (accepted_length, checkpoint_cursor, out_of_window_cursor,
                                       window_covered)
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.unified.codec import from_json
from kvfuzz.strategies.unified.profile import SWA_COMPONENT
from kvfuzz.strategies.unified.trace import to_json


def test_a_match_ends_where_a_window_of_live_swa_is_above_it():
    live, dead = True, False
    assert window_covered([(4, live), (4, live)], 100)  # no tombstone: any length
    assert not window_covered([(4, dead), (4, live)], 8)  # 4 live tokens after the tombstone
    assert window_covered([(4, dead), (4, live), (4, live)], 8)
    assert not window_covered([(4, live), (4, dead)], 1)  # ends at a tombstone
    assert accepted_length([(4, dead), (4, live), (4, live), (4, dead), (2, live)], 8) == 12
    assert accepted_length([(4, dead), (2, live)], 4) == 0


@pytest.mark.parametrize("pre_len, cursor, protected, window, page, expected", [
    (8, 0, 0, 8, 1, 0),     # 8 - 8 < 0 + 1: the window has not moved past a token
    (9, 0, 0, 8, 1, 1),
    (10, 0, 0, 8, 1, 2),    # 10 - max(8, 1)
    (10, 0, 4, 8, 1, 4),    # never below what the tree protects
    (13, 0, 0, 1, 4, 8),    # 13 - 4 (a page at least), page-floored
    (13, 8, 0, 1, 4, 8),    # not backwards
    (20, 0, 0, 5, 4, 12),   # 20 - 8 (the window in whole pages)
])
def test_a_checkpoint_moves_the_out_of_window_cursor(pre_len, cursor, protected, window, page,
                                                     expected):
    assert out_of_window_cursor(pre_len, cursor, protected, window, page) == expected


def test_a_checkpoint_up_to_a_branch_frees_twice():
    # r matched 4 tokens with SWA, 8 with full attention (its branch), filled 9, window 2,
    # pages of 4: the insert up to 8 frees nothing past the protected 4; protected 8, the
    # second pass (key 9) keeps a page: the cursor ends at 8 (found by seeded trace 30).
    assert checkpoint_cursor(9, 8, 0, 4, 2, 4) == 8
    assert checkpoint_cursor(9, None, 0, 4, 2, 4) == 4
    assert checkpoint_cursor(9, 4, 0, 4, 2, 4) == 4  # a branch at the protected length: none


def snapshot() -> dict:
    """A page-size-1 SWA tree: [1 2] (a tombstone, full slots 1 2) -> [1 2 3 4] (SWA 5 6), one
    request holding full 3 4 past its protected 4 and their SWA 7 8, in pools of 8."""
    return {"nodes": [(-1, None, [1, 2], 0, [1, 2], 1), (0, None, [1, 2, 3, 4], 2, [5, 6], 0)],
            "inner": None, "unlocked": [1, 2, 5, 6], "walk": [],
            "evictable": 4, "protected": 0, "total": [4, 2], "available": 2,
            "free": [7, 8], "rows": {0: [1, 2, 5, 6, 3, 4]},
            "aliases": [], "events": [],
            "swa": {"values": [None, [5, 6]], "mapped": [[0, 0], [5, 6]],
                    "requests": {0: (4, 4, 6, [7, 8], None)}, "free": [1, 2, 3, 4],
                    "available": 4, "evictable": 2, "protected": 0}}


def check(snap) -> list:
    return swa_problems(snap, views(snap, 1), 1, 8)


def broken(change) -> dict:
    snap = deepcopy(snapshot())
    change(snap)
    return snap


def test_a_correct_swa_tree_has_no_problem():
    assert check(snapshot()) == []


@pytest.mark.parametrize("change, label, text", [
    (lambda s: s["swa"]["values"].__setitem__(1, [6, 5]), "swa value",
     "holds SWA slots [6, 5], its full slots map to [5, 6]"),
    (lambda s: s["swa"]["free"].append(5), "swa pool", "pages both in the tree and on the free"),
    (lambda s: s["swa"].update(available=3, free=[1, 2, 3]), "swa pool", "1 tokens lost"),
    (lambda s: s["swa"].update(evictable=4), "swa sizes", "2 counted twice"),
    (lambda s: s.update(total=[4, 4]), "total_size", "hold 4 full and 2 SWA slots"),
    (lambda s: s.update(available=1, free=[8]), "allocator", "1 tokens lost"),
])
def test_each_swa_check_catches_its_broken_state(change, label, text):
    problems = check(broken(change))
    assert [p for p in problems if p[0] == label and text in p[1]], problems


def test_a_match_past_a_tombstone_needs_a_window():
    snap = snapshot()
    nodes, values = views(snap, 1), snap["swa"]["values"]
    assert match_problems(nodes, values, 0, (1, 2, 3, 4), 4, 2) == []
    assert match_problems(nodes, values, 0, (1, 2, 3, 4), 0, 3) == []  # 2 live < 3
    found = match_problems(nodes, values, 0, (1, 2, 3, 4), 4, 3)
    assert found and "less than a window of live SWA" in found[0][1] and \
        found[0][1].endswith("ends at 0")
    found = match_problems(nodes, values, 0, (1, 2, 3, 4), 2, 1)
    assert found and "ending at a tombstone" in found[0][1]


def test_the_cores_swa_state_is_compared():
    rust = snapshot()
    assert state_problems(rust, deepcopy(rust)) == []
    python = broken(lambda s: s["swa"]["free"].reverse())
    assert any("swa" in text for _, text in state_problems(rust, python))


SWA = Implementation("double", "unified", "x:Y", "test double", UPSTREAM,
                     preconditions=(SWA_COMPONENT,))


def test_the_swa_stream_is_pinned():
    # As every target's default stream (tests/engine/test_generators_pinned.py).
    traces = [UNIFIED.generator.generate(0, index, [SWA]) for index in range(3)]
    assert [UNIFIED.codec.input_id(t) for t in traces] == \
        ["f8f121453606df74", "ae02859d5d544142", "bacb8dbf6c5ce757"]
    assert {t.origin.generator for t in traces} == {"unified-swa/1"}


def test_the_window_is_read_and_refused_in_one_line():
    trace = UNIFIED.generator.generate(0, 0, [SWA])
    assert trace.origin.generator == "unified-swa/1" and trace.components == "full+swa"
    assert trace.window >= 1 and from_json(to_json(trace)) == trace
    full = to_json(UNIFIED.generator.generate(0, 0))
    assert "window" not in full and from_json(full).window == 0
    for data, field in (({**to_json(trace), "window": 0}, "window"),
                        ({**full, "window": 4}, "window"),
                        ({**to_json(trace), "components": "full+mamba"}, "window")):
        with pytest.raises(FormatError) as error:
            from_json(data, "t.json")
        assert f"field '{field}'" in str(error.value) and "\n" not in str(error.value)
