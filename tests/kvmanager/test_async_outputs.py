"""The "async outputs" profile (`strategies/kvmanager/async_outputs.py`): traces shaped as vLLM's
`AsyncScheduler` makes its calls, so the lock step's asynchronous ops (`placeholder`,
`processed`, a stale `sample`; `fuzz/kvmanager/async_ops.py`) come from kvfuzz's own generator,
not only from the guard's recordings. The released class runs its traces clean
(`test_every_profile.py`); here: the traces are the scheduler's shape (no vLLM needed), and the
catalogue mutants an output placeholder's slot reaches are caught there on the profile's first
traces (slow: vLLM)."""

from __future__ import annotations

from collections import Counter

import pytest

from kvfuzz.strategies.kvmanager import async_outputs, generator
from kvfuzz.strategies.kvmanager.trace import (Arrive, Placeholder, Preempt, Processed, Sample,
                                               Schedule, Settle)
from tests.helpers import divergence, with_engine

ASYNC_OPS = ("placeholder", "processed", "stale sample", "settle")


def _async_ops(traces) -> Counter:
    """How many of each asynchronous op `traces` hold."""
    made = Counter()
    for trace in traces:
        for op in trace.ops:
            if isinstance(op, Sample) and op.stale:
                made["stale sample"] += 1
            elif isinstance(op, (Placeholder, Processed, Settle)):
                made[type(op).__name__.lower()] += 1
    return made


def _shape_problems(trace) -> list[str]:
    """What no asynchronous scheduler makes: a placeholder of a request never scheduled; a stale
    token of a request not preempted since its last admission, or two of one preemption."""
    problems, scheduled, stale_ok = [], set(), {}
    for index, op in enumerate(trace.ops):
        if isinstance(op, Arrive):
            stale_ok[op.rid] = False
        elif isinstance(op, Schedule):
            scheduled.add(op.rid)
            stale_ok[op.rid] = False
        elif isinstance(op, Preempt):
            stale_ok[op.rid] = True
        elif isinstance(op, Placeholder) and op.rid not in scheduled:
            problems.append(f"op {index}: placeholder of r{op.rid}, never scheduled")
        elif isinstance(op, Sample) and op.stale:
            if not stale_ok.get(op.rid):
                problems.append(f"op {index}: stale token of r{op.rid}, not preempted")
            stale_ok[op.rid] = False
    return problems


def test_the_profiles_traces_make_every_asynchronous_op_in_the_schedulers_shape():
    traces = [async_outputs.GENERATOR.generate(0, index) for index in range(40)]
    assert all(t.async_scheduling and t.note == "profile async outputs" for t in traces)
    made = _async_ops(traces)
    assert all(made[name] for name in ASYNC_OPS), made
    assert [p for t in traces for p in _shape_problems(t)] == []
    # most traces with a window (whose blocks the tokens in flight hold), as "async"'s
    assert sum(bool(t.window) for t in traces) > len(traces) // 2


def test_the_checks_fail_on_traces_without_the_asynchronous_ops():
    """The two checks above can fail: the corner "async" profile makes none of the new ops, and
    a stale token moved ahead of its preemption is not the scheduler's shape."""
    corners = [generator.ALONE["async"].generate(0, index) for index in range(40)]
    assert all(t.async_scheduling for t in corners) and _async_ops(corners) == Counter()
    trace = next(t for t in (async_outputs.GENERATOR.generate(0, index) for index in range(40))
                 if _async_ops([t])["stale sample"])
    ops = list(trace.ops)
    stale = next(i for i, op in enumerate(ops) if isinstance(op, Sample) and op.stale)
    preempt = max(i for i, op in enumerate(ops[:stale])
                  if isinstance(op, Preempt) and op.rid == ops[stale].rid)
    ops.insert(preempt, ops.pop(stale))
    assert _shape_problems(trace) == []
    assert _shape_problems(type(trace)(**{**vars(trace), "ops": tuple(ops)}))


# Catalogue mutants the output placeholder's slot reaches, each caught at a `placeholder` op of
# the profile's trace `index`: the tokens in flight ignored or counted early (the window freed
# under the token in flight), extra retained tokens freed, a window's first block kept, the
# slots past the request's tokens clamped (as spec-decode padding's: the corner "async"
# profile's first 30 traces never catch it), a reused block keeping its hash.
AT_PLACEHOLDER = [("in_flight_ignored", 0, "invariant"), ("window_moves_early", 0, "invariant"),
                  ("retained_tokens_freed", 0, "invariant"),
                  ("window_keeps_first_block", 0, "invariant"),
                  ("spec_pad_rows_clamped", 0, "result"),
                  ("pool_reuse_keeps_hash", 10, "block hash")]


@with_engine("vllm")
@pytest.mark.parametrize("name, index, label", AT_PLACEHOLDER)
def test_a_mutant_the_placeholders_slot_reaches_is_caught_there(name, index, label):
    """Each caught on the profile's trace `index`, which the released class runs clean, at an
    output placeholder's slot ("r1 gets the slot of the token its step in flight samples")."""
    trace = async_outputs.GENERATOR.generate(0, index)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, f"mutant.vllm.kvmanager.{name}")
    assert found is not None and found.what.startswith(label) and \
        "the slot of the token its step in flight samples" in found.what, \
        found and found.report()


# -- a refused prefill chunk made again after the preemption (since 2026-12-06) ----------------
def _chunks_again(trace) -> tuple[int, list[str]]:
    """How many prefill chunks `trace` makes again (`schedule` with `again`), and what no
    scheduler makes: one not preceded by the same request's refused chunk (a plain `schedule`
    of the same size, or one made again) with a preemption between."""
    made, problems, refused, preempted = 0, [], {}, False
    for index, op in enumerate(trace.ops):
        if isinstance(op, Preempt):
            preempted = True
        elif isinstance(op, Schedule) and op.again:
            made += 1
            if refused.get(op.rid) != op.chunk or not preempted:
                problems.append(f"op {index}: r{op.rid}'s chunk made again, none refused")
        if isinstance(op, Schedule):
            refused[op.rid], preempted = op.chunk, False if not op.again else preempted
    return made, problems


def test_a_refused_prefill_chunk_is_made_again_after_the_preemption():
    """The "async outputs", "async connector" and "async drafts" generators make a prefill
    chunk their estimate says the pool refuses, then the preemption, then the same chunk again
    (`again`), as the released running loop retries the same `allocate_slots`; "async
    streaming" keeps its traces as they were (none)."""
    from kvfuzz.strategies.kvmanager import async_connector, async_drafts, async_streaming

    total = Counter()
    for module in (async_outputs, async_connector, async_drafts, async_streaming):
        for index in range(300):
            made, problems = _chunks_again(module.GENERATOR.generate(0, index))
            assert problems == [], (module.__name__, index, problems)
            total[module.__name__.rsplit(".", 1)[1]] += made
    assert total["async_streaming"] == 0 and total["async_connector"] > 0 and \
        total["async_outputs"] + total["async_drafts"] > 0, total


def test_a_chunk_made_again_applies_only_after_its_refusal_and_a_preemption():
    """The lock step's rule (`AsyncOps.made_again`): where a generator's estimate was wrong
    (the chunk had its slots, or nothing was preempted since), it resolves to nothing."""
    from types import SimpleNamespace

    from kvfuzz.fuzz.kvmanager.async_ops import CHUNK_AGAIN, AsyncOps

    counted = Counter()
    judge = SimpleNamespace(preemptions=3, count=lambda name: counted.update([name]))
    made_again = AsyncOps.made_again.__get__(judge)
    assert not made_again(SimpleNamespace(refused=None))  # its chunk was not refused
    assert not made_again(SimpleNamespace(refused=3))  # refused, nothing preempted since
    assert made_again(SimpleNamespace(refused=2)) and counted == {CHUNK_AGAIN: 1}
