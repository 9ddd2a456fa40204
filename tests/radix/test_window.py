"""A pure-SWA cache's sliding window without SGLang: the oracle's facts (what a slide frees, the
floor, what a release frees, the four size reads) on worked examples, the window model over a
request's life, the trace fields' format and one-line errors, the pinned `radix-window/1` stream
(and its byte-fed twin) reaching what it aims at, what the window entry declares, and the
judge's window checks on hand-made snapshots."""

import random

import pytest

from kvfuzz.fuzz.radix.window import ByWindow, WindowLockstep
from kvfuzz.fuzz.radix.lockstep import RadixLockstep
from kvfuzz.impl.radix import UPSTREAM_DECLARES, WINDOW_DECLARES
from kvfuzz.oracle.radix.window import (WindowModel, dead_lo, key_limit, own_ranges, slide,
                                        swa_sizes)
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.radix import codec, window
from kvfuzz.strategies.radix.profile import PREFILL_AWARE, WINDOW_NEEDED, broken
from kvfuzz.strategies.radix.trace import Admit, Checkpoint, Extend, Finish, Trace, to_json
from tests.helpers import dumps, loads


# -- the oracle's facts -------------------------------------------------------------------------
@pytest.mark.parametrize("pre_len, cursor, protected, floor, window_, page, expected", [
    (4, 0, 0, 0, 4, 1, (0, 0)),     # pre_len - window < cursor + 1: nothing moves
    (5, 0, 0, 0, 4, 1, (0, 1)),     # one token out of the window
    (9, 0, 0, 5, 3, 1, (5, 6)),     # the floor holds the prompt: frees start at it
    (9, 0, 8, 5, 3, 1, (8, 8)),     # the tree's prefix is above: nothing of it freed
    (6, 0, 0, 5, 3, 1, (5, 5)),     # the cursor rises to the floor though nothing is freed
    (20, 3, 0, 0, 3, 4, (3, 16)),   # above page size 1: the window ceiled to a page
    (9, 4, 0, 5, 2, 4, (8, 8)),     # ... and a floor ceiled to its page above the prefix
])
def test_a_slide_frees_what_left_the_window_above_the_floor(pre_len, cursor, protected, floor,
                                                              window_, page, expected):
    assert slide(pre_len, cursor, protected, floor, window_, page) == expected


def test_the_floor_cuts_a_checkpoint_and_bounds_a_release():
    assert key_limit(0, 1) is None and key_limit(5, 1) == 5 and key_limit(5, 4) == 8
    assert dead_lo(4, 5, 4) == 8 and dead_lo(8, 5, 4) == 8 and dead_lo(3, 0, 1) == 3
    # a row of 10 with the tree's 2, floor 4, the window freed [4, 7): the request keeps the rest
    assert own_ranges(10, 2, 7, 4, 1) == [(2, 4), (7, 10)]
    assert own_ranges(10, 2, 0, 4, 1) == [(2, 4), (4, 10)]  # nothing freed: all of it
    assert swa_sizes(3, 5) == {"swa_evictable": 3, "swa_protected": 5, "full_evictable": 0,
                               "full_protected": 0}


def test_the_window_model_frees_out_of_window_slots_once():
    model = WindowModel(1, 16, "lru", 2)
    model.admit_match(1, (1, 2, 3, 4, 5, 6, 7, 8), 3, 0, 0)
    model.admit_lock(1)
    model.grant(1, model_slots(model, 3))
    model.set_floor(1, 3)
    for _ in range(4):  # decode steps: 4, 5, 6, 7 tokens held
        model.grant(1, model_slots(model, 1))
    assert model.slide(1) == 5  # pre_len 7, window 2: [3, 5) out of the window
    row = model.requests[1].row
    assert {row[3], row[4]} <= model.free and model.held() == {row[0], row[1], row[2], row[5],
                                                                row[6]}
    assert model.checkpoint(1) == 3  # the key is cut at the floor: the prompt only
    free_before = set(model.free)
    model.release(1)
    assert model.free - free_before == {row[5], row[6]}  # not the window's, not the tree's


def model_slots(model, count):
    return sorted(model.free)[:count]


# -- the format --------------------------------------------------------------------------------
def test_a_window_trace_round_trips_and_a_trace_without_one_keeps_its_document():
    trace = window.WINDOW_GENERATOR.generate(0, 0)
    assert trace.swa_window and trace.prefill_aware and loads(dumps(trace)) == trace
    plain = Trace(1, 8, "lru", False, (Admit(1, (1, 2), 2),))
    assert "swa_window" not in to_json(plain) and "prefill_aware" not in to_json(plain)
    assert "pure SWA, window" in trace.describe()


@pytest.mark.parametrize("fields, shows", [
    ({"swa_window": 2, "page_size": 2, "size": 8}, "'swa_window': needs page_size 1"),
    ({"prefill_aware": True}, "'prefill_aware': needs a swa_window"),
    ({"swa_window": -1}, "'swa_window': expected an integer in [0, 2048]"),
    ({"swa_window": 2, "prefill_aware": 1}, "'prefill_aware': expected true or false"),
])
def test_a_malformed_window_is_one_line_naming_the_field(fields, shows):
    data = {**to_json(Trace(1, 8, "lru", False, ())), **fields}
    with pytest.raises(FormatError) as error:
        codec.from_json(data, "t.json")
    assert shows in str(error.value) and "\n" not in str(error.value), str(error.value)


# -- the stream and the declarations -----------------------------------------------------------
def test_the_window_stream_is_pinned_and_decodes_past_its_window():
    assert [window.WINDOW_GENERATOR.generate(0, i).trace_id() for i in range(3)] == \
        ["3fd604d5e84b50c0", "24bb65698f908166", "1dfff1cf454cdab5"]
    traces = [window.WINDOW_GENERATOR.generate(0, i) for i in range(60)]
    assert {t.page_size for t in traces} == {1} and {t.swa_window for t in traces} == \
        set(window.WINDOWS)
    admits = [(t.swa_window, op) for t in traces for op in t.ops if isinstance(op, Admit)]
    assert sum(len(op.tokens) - op.prompt > w + 1 for w, op in admits) > len(admits) // 4
    fuzzed = window.WINDOW_GENERATOR.from_bytes(random.Random(1).randbytes(400))
    assert fuzzed.swa_window and loads(dumps(fuzzed)) == fuzzed


def test_a_window_trace_needs_a_declared_window_and_the_entry_runs_prefill_aware():
    ops = (Admit(1, (1, 2, 3, 4), 2), Extend(1, 2), Checkpoint(1), Finish(1))
    aware = Trace(1, 8, "lru", False, ops, swa_window=1, prefill_aware=True)
    floorless = Trace(1, 8, "lru", False, ops, swa_window=1)
    assert broken(aware, UPSTREAM_DECLARES) == [WINDOW_NEEDED]
    assert broken(aware, WINDOW_DECLARES) == []
    assert broken(floorless, WINDOW_DECLARES) == [PREFILL_AWARE]


def test_the_judge_is_picked_by_the_trace():
    assert set(ByWindow.EVENTS) == set(RadixLockstep.TREE_EVENTS) | set(
        WindowLockstep.EVENTS) and set(RadixLockstep.EVENTS) == set(RadixLockstep.TREE_EVENTS)


# -- the judge's window checks on hand-made snapshots -------------------------------------------
def judge_with(model):
    judge = object.__new__(WindowLockstep)
    judge.model = model
    return judge


# window 2 with a draft window of 3: a running request's frees keep 3 tokens
DRAFT_RETAIN = (3, 3)


def test_the_retain_window_with_a_draft_is_judged():
    """`swa_retain_window` of a cache built with a longer draft window keeps the draft's: the
    check that kills `draft_window_dropped` (the draft window left at the class default 0)."""
    model = WindowModel(1, 8, "lru", 2)
    reads = {"swa_evictable": 0, "swa_protected": 0, "full_evictable": 0, "full_protected": 0}
    found = judge_with(model).more_problems({"draft_retain": (3, 2), "swa": reads,
                                             "cursors": {}}, [])
    assert found == [("swa_retain_window", "built with window 2 and draft_swa_window 3 it "
                                           "keeps 2, expected 3")]


def test_the_swa_size_reads_are_judged_against_the_nodes_with_the_sign():
    from kvfuzz.oracle.radix.invariants import NodeView

    node = NodeView((0, (1, 2)), None, (0, (1,)), (1, 2), [3, 4], 0, 1, 0, 1.0, 1.0)
    reads = {"swa_evictable": 2, "swa_protected": 0, "full_evictable": 0, "full_protected": 0}
    model = WindowModel(1, 8, "lru", 2)
    model.tree.insert(0, [1, 2], [3, 4])
    assert judge_with(model).more_problems({"draft_retain": DRAFT_RETAIN, "swa": reads, "cursors": {}}, [node]) == []
    wrong = {**reads, "swa_evictable": 0}
    found = judge_with(model).more_problems({"draft_retain": DRAFT_RETAIN, "swa": wrong, "cursors": {}}, [node])
    assert found and "2 tokens missing from the count" in found[0][1], found
    locked = {**reads, "swa_protected": 2}
    found = judge_with(model).more_problems({"draft_retain": DRAFT_RETAIN, "swa": locked, "cursors": {}}, [node])
    assert found and "2 tokens counted twice" in found[0][1], found
    full = {**reads, "full_evictable": 2}
    found = judge_with(model).more_problems({"draft_retain": DRAFT_RETAIN, "swa": full, "cursors": {}}, [node])
    assert found == [("full_evictable_size", "expected 0, actual 2")]


def test_a_cursor_the_model_does_not_hold_is_reported():
    model = WindowModel(1, 8, "lru", 2)
    model.admit_match(1, (1, 2, 3), 2, 0, 0)
    reads = {"swa_evictable": 0, "swa_protected": 0, "full_evictable": 0, "full_protected": 0}
    found = judge_with(model).more_problems({"draft_retain": DRAFT_RETAIN, "swa": reads, "cursors": {1: 2}}, [])
    assert found == [("window cursor", "r1's window cursor is 2, expected 0")]


def test_the_hypothesis_strategy_draws_window_traces():
    from hypothesis import given, settings

    seen = []

    @settings(max_examples=5, database=None, deadline=None)
    @given(window.window_traces(1024))
    def draw(trace):
        assert trace.swa_window and trace.page_size == 1 and loads(dumps(trace)) == trace
        seen.append(trace)

    draw()
    assert len(seen) == 5
