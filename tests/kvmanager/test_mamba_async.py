"""Asynchronous scheduling beside a Mamba "align" group (issue 24; docs/upstream-vllm.md, "Tokens
in flight beside a Mamba align group"): vLLM 0.33.0's `allocate_slots` frees the group's states on
the processed count (its computed tokens less those in flight), so a request keeps the state its
step in flight reads and what that step writes (`oracle/kvmanager/mamba_align.flight_positions`,
`align_count.freed`); the reduced mode judges it (`fuzz/kvmanager/align_async.py`), the "mamba
align" profile makes such traces in half of those without speculative blocks
(`strategies/kvmanager/mamba_async.py`)."""

from dataclasses import replace

import pytest

from kvfuzz.oracle.kvmanager import align_count, mamba_align
from kvfuzz.strategies.kvmanager import hybrid, mamba_async
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.trace import Decode, Placeholder, Sample, Settle, to_json
from tests.helpers import with_engine

_ENGINE = with_engine("vllm")  # (slow: it imports vLLM)
ASYNC = (35, 38, 39)  # seed 0's first "mamba align" traces with tokens in flight
DRAFTED = (38, 39, 70)  # and the first with draft tokens in flight (speculative Mamba blocks)


def test_the_states_kept_for_steps_in_flight():
    # processed 8 tokens of blocks of 4 (its state at 1); the step in flight 8 -> 12 writes 2
    # and took a checkpoint at 1 (blocks of 4, so none); nothing processed: none kept for it
    assert mamba_align.flight_positions(8, [(8, 12, None)], 4) == {1, 2}
    assert mamba_align.flight_positions(0, [(0, 9, 1)], 4) == {1, 2}
    # the table after a step 12 -> 13 with 8 -> 12 in flight: position 1 allowed only so
    table = [0, 5, 6, 7]
    assert "expected only positions" in mamba_align.table_problems(table, 12, 13, 4)
    assert mamba_align.table_problems(table, 12, 13, 4, in_flight=frozenset({1, 2})) is None


def test_the_count_frees_only_below_the_processed_state():
    engine = align_count.Engine(block_size=4, hash_size=4, max_model_len=64)
    ref = [0, 1, 1, 1, 1]
    step = align_count.Step(computed=12, new=1, tokens=13, prompt=13, mamba_table=(0, 3, 4),
                            allocated=True)
    assert align_count.freed(engine, step, ref) == ((0, 0, 4), 1)   # synchronous: 3 goes back
    flying = align_count.Step(computed=12, new=1, tokens=13, prompt=13, mamba_table=(0, 3, 4),
                              allocated=True, in_flight=4)
    assert align_count.freed(engine, flying, ref) == ((0, 3, 4), 0)  # the step in flight reads 3


def test_the_codec_takes_tokens_and_drafts_in_flight_and_eagle():
    trace = hybrid.MAMBA_ALIGN.generate(0, ASYNC[0])
    assert trace.async_scheduling and trace.mamba_mode == "align"
    assert from_json(to_json(trace)) == trace
    # speculative Mamba blocks with tokens in flight: taken since 2026-12-06 (draft tokens in
    # flight, `align_async.placeholder`)
    drafted = replace(trace, mamba_speculative=1)
    assert from_json(to_json(drafted)) == drafted
    # EAGLE's drop beside the group: taken since 2026-12-06 (`align_eagle.py`;
    # test_mamba_eagle.py holds what the codec still refuses with it)
    eagle = replace(trace, eagle=True)
    assert from_json(to_json(eagle)) == eagle


def test_the_traces_without_tokens_in_flight_are_the_profiles_own(monkeypatch):
    """The draw comes after every other: with it off, each trace it left synchronous is the
    same, and those it made asynchronous hold its ops reshaped."""
    made = [hybrid.MAMBA_ALIGN.generate(0, index) for index in range(80)]
    monkeypatch.setattr(mamba_async, "SHARE", 0.0)
    before = [hybrid.MAMBA_ALIGN.generate(0, index) for index in range(80)]
    flying = [index for index, trace in enumerate(made) if trace.async_scheduling]
    assert flying[:3] == list(ASYNC) and 3 <= len(flying) <= 20, flying
    assert all(made[i] == before[i] for i in range(80) if i not in flying)
    assert not any(made[i] == before[i] for i in flying)
    # the synchronous traces with speculative blocks stay synchronous (drafts in flight come
    # from the draw after the asynchronous one, `test_the_drafts_in_flight_are_drawn_last`)
    assert all(not before[i].mamba_speculative for i in flying)


def test_the_drafts_in_flight_are_drawn_last(monkeypatch):
    """Speculative blocks and draft tokens in flight are given to a share of the asynchronous
    traces by the last draw (on since 2026-12-06): with it off every other trace is the same
    and those it drafted are asynchronous without drafts; with it on their placeholders carry
    k drafts (k below the block size, `mamba_async.drafted`) and their settles roll the
    rejected back."""
    made = [hybrid.MAMBA_ALIGN.generate(0, index) for index in range(80)]
    monkeypatch.setattr(mamba_async, "DRAFT_SHARE", 0.0)
    before = [hybrid.MAMBA_ALIGN.generate(0, index) for index in range(80)]
    drafted = [i for i, trace in enumerate(made) if trace != before[i]]
    assert drafted[:3] == list(DRAFTED), drafted
    for i in drafted:
        trace, plain = made[i], before[i]
        assert plain.async_scheduling and not plain.mamba_speculative
        assert trace.async_scheduling and 1 <= trace.mamba_speculative < trace.block_size
        assert trace.lookahead == trace.mamba_speculative and len(trace.ops) == len(plain.ops)
        drafts = [op.drafts for op in trace.ops if isinstance(op, Placeholder)]
        assert drafts and set(drafts) == {trace.mamba_speculative}
        assert any(isinstance(op, Settle) and op.rejected for op in trace.ops)


def output_shape_problems(trace) -> list:
    """What in a drafted trace's ops vLLM's AsyncScheduler with k drafts a step never makes
    (the guard's MAMBA_ASYNC_MTP recordings: `P s+ X` a step, `scheduler.py` 2349-2364): a
    step of one token without drafts (`decode`), or a `settle` that does not end an output of
    its request: its `sample`s just before it (1 + accepted) with the rejected making the
    drafts of one step, k (a placeholder's) or 0 (a prefill chunk's). (A `preempt` with
    `refused` and the output's `sample`s with `stale` before it, since 2026-12-07, are the other
    branch of the same output: where they apply, its own ops resolve to nothing.)"""
    problems, run = [], {}  # rid -> the samples since its last other op
    for at, op in enumerate(trace.ops):
        rid = getattr(op, "rid", None)
        if getattr(op, "stale", False) or getattr(op, "refused", False):
            continue
        if isinstance(op, Decode):
            problems.append((at, "a decode beside drafts"))
        if isinstance(op, Settle) and (not run.get(rid) or run[rid] - 1 + op.rejected not in (
                0, trace.mamba_speculative)):
            problems.append((at, f"a settle of {op.rejected} after {run.get(rid, 0)} samples"))
        run[rid] = run.get(rid, 0) + 1 if isinstance(op, Sample) else 0
    return problems


def test_the_drafted_traces_are_shaped_as_vllms_async_scheduler_makes_them():
    """Every settle of a drafted trace ends its output (after its samples, rejecting what that
    output's step drafted and did not accept), and no decode: index 1390 diverged on settles
    that rolled back drafts of a step whose output had not come (docs/upstream-vllm.md, 'Draft
    tokens in flight beside a Mamba "align" group')."""
    drafted = [trace for trace in map(lambda i: hybrid.MAMBA_ALIGN.generate(0, i), range(200))
               if trace.mamba_speculative and trace.async_scheduling]
    assert len(drafted) >= 8
    for trace in drafted:
        assert output_shape_problems(trace) == [], trace.note
    # (the checker sees main's shapes before 2026-12-06: a settle with no sample, a decode)
    assert output_shape_problems(replace(drafted[0], ops=(
        Placeholder(1, 1), Settle(1, 1), Decode(1, 3)))) == [
        (1, "a settle of 1 after 0 samples"), (2, "a decode beside drafts")]


# "mamba align" index 1390 (draws on) shrunk: r6's 4-token prompt, a placeholder with a draft,
# a settle rejecting it with no output (none of vLLM's), then a placeholder refused by vLLM:
# that settle's `cache_blocks(r6, 3)` keyed the prompt's partial tail (`_cache_partial_tail_
# block`) and the next step counted its copy-on-write block
SHRUNK_1390 = {
    "format": "kvfuzz-kvmanager-trace/1", "blocks": 30, "block_size": 2, "window": 0,
    "max_model_len": 13, "retention": 0, "lookahead": 1, "async_scheduling": True,
    "hash_block_size": 1, "mamba_mode": "align", "mamba_checkpoint": 1,
    "mamba_speculative": 1, "ops": [
        {"op": "arrive", "rid": 2, "tokens": [20]}, {"op": "schedule", "rid": 2, "chunk": 10000},
        {"op": "decode", "rid": 2, "token": 33}, {"op": "arrive", "rid": 4, "tokens": [20]},
        {"op": "decode", "rid": 2, "token": 6}, {"op": "arrive", "rid": 5, "tokens": [11]},
        {"op": "schedule", "rid": 5, "chunk": 5}, {"op": "placeholder", "rid": 5, "drafts": 1},
        {"op": "schedule", "rid": 4, "chunk": 10000},
        {"op": "placeholder", "rid": 2, "drafts": 1},
        {"op": "placeholder", "rid": 4, "drafts": 1},
        {"op": "placeholder", "rid": 4, "drafts": 1},
        {"op": "arrive", "rid": 6, "tokens": [20, 29, 6, 38]},
        {"op": "schedule", "rid": 6, "chunk": 10000},
        {"op": "placeholder", "rid": 5, "drafts": 1},
        {"op": "placeholder", "rid": 6, "drafts": 1}, {"op": "settle", "rid": 6, "rejected": 1},
        {"op": "placeholder", "rid": 6, "drafts": 1}]}


@_ENGINE
def test_a_settle_vllm_never_makes_resolves_to_nothing(monkeypatch):
    """The reduced mode judges a settle rolling drafts back only as vLLM's `update_from_output`
    makes one (`align_async.settle_made`): index 1390's shrunk case agrees with its settle
    resolved to nothing, and diverges as it did ("None vs success") where the settle applies."""
    from kvfuzz.fuzz.kvmanager import align_async
    from kvfuzz.fuzz.targets import TARGETS

    target = TARGETS["kvmanager"]
    released, trace = target.catalogue.resolve("vllm.kvmanager"), from_json(SHRUNK_1390)
    outcome = target.check(trace, released)
    assert outcome.divergence is None and outcome.features[align_async.UNMADE] == 1
    monkeypatch.setattr(align_async.AlignAsync, "settle_made", lambda self, op, request: True)
    outcome = target.check(trace, released)
    assert "None vs success" in str(outcome.divergence)


@_ENGINE
def test_the_release_agrees_with_tokens_in_flight():
    from kvfuzz.fuzz.kvmanager import align_async
    from kvfuzz.fuzz.targets import TARGETS

    target = TARGETS["kvmanager"]
    released, events = target.catalogue.resolve("vllm.kvmanager"), {}
    for index in ASYNC:
        outcome = target.check(hybrid.MAMBA_ALIGN.generate(0, index), released)
        assert outcome.divergence is None, (index, outcome.divergence)
        for name in align_async.EVENTS + ("placeholder slot (token in flight)",):
            events[name] = events.get(name, 0) + outcome.features[name]
    assert events[align_async.STEP] > 20 and events[align_async.READ] > 100, events
    assert events["placeholder slot (token in flight)"] > 10, events


@_ENGINE
def test_freeing_on_the_computed_count_frees_what_a_step_in_flight_reads():
    """vLLM's own `in_flight_ignored` mutant (the skipped blocks freed on the computed count):
    beside the Mamba group the step in flight's state is freed under it, which on index 0 the
    check of the steps in flight alone sees (the kept-states rule allows fewer states; the
    exact count sees the extra state freed on other traces)."""
    from kvfuzz.fuzz.targets import TARGETS

    target = TARGETS["kvmanager"]
    mutant = target.catalogue.resolve("mutant.vllm.kvmanager.in_flight_ignored")
    outcome = target.check(hybrid.MAMBA_ALIGN.generate(0, ASYNC[0]), mutant)
    assert outcome.divergence is not None
    assert "still in flight, reads its state from block" in str(outcome.divergence)


@_ENGINE
def test_vllms_async_scheduler_beside_the_group_runs_guarded_the_same_and_replays(tmp_path):
    """`MAMBA_ASYNC` (vLLM's AsyncScheduler over MAMBA_ALIGN's group): sessions 0-1 guarded clean
    with steps in flight judged, every request finished, the same as unguarded (steps,
    scheduled tokens, preemptions), the recording the guarded trace and replaying clean."""
    from kvfuzz.fuzz.kvmanager import align_async
    from tests.kvmanager.test_guard import clean_and_replaying

    flying = held = 0
    for seed in range(2):
        guarded = clean_and_replaying(seed, "MAMBA_ASYNC", tmp_path).manager.kvfuzz_session
        assert guarded.header.async_scheduling
        flying += guarded.lock.events[align_async.STEP]
        held += guarded.lock.events[align_async.READ]
    assert flying > 300 and held > 2000, (flying, held)
    assert not list(tmp_path.glob("*.json"))


@_ENGINE
def test_a_guarded_session_catches_a_step_in_flights_state_freed(tmp_path):
    """vLLM's `in_flight_ignored` mutant as the manager of MAMBA_ASYNC's session 0: raised with
    a file that replays (and replays clean on the released class)."""
    from tests import guarding
    from tests.kvmanager.test_guard import scheduler_session

    guarding.assert_mutant_raises_in_sessions(
        lambda seed: scheduler_session(seed, "in_flight_ignored", tmp_path,
                                       workload="MAMBA_ASYNC"),
        "mutant.vllm.kvmanager.in_flight_ignored", "vllm.kvmanager", seeds=1)


@_ENGINE
def test_the_release_agrees_with_drafts_in_flight():
    """The first "mamba align" traces with draft tokens in flight agree, their
    drafted steps judged (the counts with the drafts in flight, the kept states, the in-flight
    reads), and a step short of the last draft step's table (index 150, which diverged while
    the reduced mode set the table to that step's: `align_drafts.drafts_allocated`)."""
    from kvfuzz.fuzz.kvmanager import align_async, align_drafts
    from kvfuzz.fuzz.targets import TARGETS

    target = TARGETS["kvmanager"]
    released, events = target.catalogue.resolve("vllm.kvmanager"), {}
    for index in DRAFTED + (150,):
        outcome = target.check(hybrid.MAMBA_ALIGN.generate(0, index), released)
        assert outcome.divergence is None, (index, outcome.divergence)
        for name in align_async.EVENTS + align_drafts.EVENTS:
            events[name] = events.get(name, 0) + outcome.features[name]
    assert events[align_async.DRAFTS] > 10 and events[align_drafts.ROLLED_BACK] > 5, events
    assert events[align_drafts.SHORTER], events


@_ENGINE
def test_vllms_async_scheduler_with_drafts_beside_the_group_runs_guarded_and_replays(tmp_path):
    """`MAMBA_ASYNC_MTP` (MAMBA_MTP under vLLM's AsyncScheduler: 2 drafts a step in flight, the
    rejected rolled back at each output): sessions 0-1 guarded clean, the same as unguarded,
    the recording the guarded trace and replaying clean. (Session 1 diverged while a settle
    set the table's draft end to its own: the next step, allocated before it, is larger.)"""
    from kvfuzz.fuzz.kvmanager import align_async, align_drafts
    from tests.kvmanager.test_guard import clean_and_replaying

    drafts = rolled = 0
    for seed in range(2):
        guarded = clean_and_replaying(seed, "MAMBA_ASYNC_MTP", tmp_path).manager.kvfuzz_session
        assert guarded.header.async_scheduling and guarded.header.mamba_speculative == 2
        drafts += guarded.lock.events[align_async.DRAFTS]
        rolled += guarded.lock.events[align_drafts.ROLLED_BACK]
    assert drafts > 50 and rolled > 30, (drafts, rolled)
    assert not list(tmp_path.glob("*.json"))
