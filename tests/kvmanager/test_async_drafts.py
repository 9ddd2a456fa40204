"""The "async drafts" profile (`strategies/kvmanager/async_drafts.py`): traces shaped as vLLM's
`AsyncScheduler` makes its calls with k draft tokens a step, so the lock step's draft ops
(`placeholder` with `drafts`, `settle` with `rejected`, a padded `schedule` with
`rows_in_flight`, stale output of several tokens; `async_ops.DRAFT_EVENTS`) come from
kvfuzz's own generator, not only from the guard's `ASYNC_SPEC` recordings. The released class
runs its traces clean (`test_every_profile.py`); here: the traces are the scheduler's shape (no
vLLM needed), and catalogue mutants the draft ops reach are caught there on the profile's first
traces (slow: vLLM)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from kvfuzz.strategies.kvmanager import async_drafts, async_outputs
from kvfuzz.strategies.kvmanager.trace import (Arrive, Placeholder, Preempt, Processed, Sample,
                                               Schedule, Settle)
from tests.helpers import divergence, with_engine

DRAFT_OPS = ("placeholder with drafts", "settle with rejected", "padded schedule in flight",
             "stale output of several tokens", "processed")


def _draft_ops(traces) -> Counter:
    """How many of each draft op `traces` hold (stale outputs: runs of two or more stale
    tokens of one request)."""
    made = Counter()
    for trace in traces:
        run, last = 0, None
        for op in trace.ops:
            stale = isinstance(op, Sample) and op.stale
            run = run + 1 if stale and op.rid == last else int(stale)
            last = op.rid if stale else None
            made["stale output of several tokens"] += run == 2
            made["placeholder with drafts"] += isinstance(op, Placeholder) and op.drafts > 0
            made["settle with rejected"] += isinstance(op, Settle) and op.rejected > 0
            made["padded schedule in flight"] += isinstance(op, Schedule) and op.rows_in_flight
            made["processed"] += isinstance(op, Processed)
    return made


def _shape_problems(trace) -> list[str]:
    """What no asynchronous scheduler with k drafts a step makes: more than k drafts or
    rejections; a padding of other than k rows, or not held in flight; a stale token of a
    request not preempted since its last admission, or more than 1 + k of one preemption."""
    k, problems, stale = trace.lookahead, [], {}
    for index, op in enumerate(trace.ops):
        if isinstance(op, (Arrive, Schedule)):
            stale[op.rid] = None
        if isinstance(op, Preempt):
            stale[op.rid] = 0
        if isinstance(op, Placeholder) and op.drafts > k or \
                isinstance(op, Settle) and op.rejected > k:
            problems.append(f"op {index}: more than {k} drafts")
        if isinstance(op, Schedule) and op.pad and (op.pad != k or not op.rows_in_flight):
            problems.append(f"op {index}: padded with {op.pad} rows, k {k}")
        if isinstance(op, Sample) and op.stale:
            if stale.get(op.rid) is None or stale[op.rid] > k:
                problems.append(f"op {index}: stale token of r{op.rid}, not preempted or "
                                f"past a step's 1 + {k}")
            else:
                stale[op.rid] += 1
    return problems


def test_the_profiles_traces_make_every_draft_op_in_the_schedulers_shape():
    traces = [async_drafts.GENERATOR.generate(0, index) for index in range(40)]
    assert all(t.async_scheduling and t.lookahead and not t.retained and
               t.note == "profile async drafts" for t in traces)
    made = _draft_ops(traces)
    assert all(made[name] for name in DRAFT_OPS), made
    assert [p for t in traces for p in _shape_problems(t)] == []
    # EAGLE (lookahead hashes of one token, or the drop) and MTP (hashes and prefill lookahead
    # of k), as the guard's sessions configure them
    assert {(t.hash_lookahead == 1, t.eagle, t.prefill_lookahead == t.lookahead)
            for t in traces} >= {(True, False, False), (False, True, False),
                                 (False, False, True), (False, True, True)}


def test_the_checks_fail_on_traces_without_drafts_or_out_of_shape():
    """The checks above can fail: the "async outputs" profile makes none of the draft ops, a
    stale token moved ahead of its preemption and a placeholder of k + 1 drafts are not the
    scheduler's shape."""
    one_token = [async_outputs.GENERATOR.generate(0, index) for index in range(40)]
    assert not any(_draft_ops(one_token)[name] for name in DRAFT_OPS[:4])
    trace = next(t for t in (async_drafts.GENERATOR.generate(0, index) for index in range(40))
                 if _draft_ops([t])["stale output of several tokens"])
    ops = list(trace.ops)
    stale = next(i for i, op in enumerate(ops) if isinstance(op, Sample) and op.stale)
    preempt = max(i for i, op in enumerate(ops[:stale])
                  if isinstance(op, Preempt) and op.rid == ops[stale].rid)
    moved = ops[:preempt] + [ops[stale]] + ops[preempt:stale] + ops[stale + 1:]
    assert _shape_problems(trace) == []
    assert _shape_problems(replace(trace, ops=tuple(moved)))
    placeholder = next(i for i, op in enumerate(ops) if isinstance(op, Placeholder))
    ops[placeholder] = replace(ops[placeholder], drafts=trace.lookahead + 1)
    assert _shape_problems(replace(trace, ops=tuple(ops)))


# Catalogue mutants the draft ops reach, each caught at a draft op of the profile's trace
# `index`: the draft slots past the request's tokens clamped (at a placeholder's drafts, and at a
# padded admission held in flight: the rows it is named for), a window's first block kept, the
# tokens in flight ignored (the window freed under the drafts of the step in flight), the
# lookahead slots left out, an exact fit refused, the cached-token estimate taking the longest
# group's (at the caching after an output that rolled rejected drafts back)
AT_DRAFTS = [("spec_pad_rows_clamped", 0, "result", "3 draft slots after it"),
             ("spec_pad_rows_clamped", 57, "result",
              "2 placeholder drafts where one is left, in flight until its output"),
             ("window_keeps_first_block", 0, "result", "3 draft slots after it"),
             ("in_flight_ignored", 3, "block table", "2 draft slots after it"),
             ("lookahead_not_allocated", 12, "result", "3 draft slots after it"),
             ("exact_fit_refused", 6, "None vs success", "2 draft slots after it"),
             ("estimate_takes_longest", 12, "estimate_cached_tokens",
              "3 rejected drafts rolled back first")]


@with_engine("vllm")
@pytest.mark.parametrize("name, index, label, where", AT_DRAFTS)
def test_a_mutant_the_draft_ops_reach_is_caught_there(name, index, label, where):
    """Each caught on the profile's trace `index`, which the released class runs clean, at the
    draft op `where` names."""
    trace = async_drafts.GENERATOR.generate(0, index)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, f"mutant.vllm.kvmanager.{name}")
    assert found is not None and found.what.startswith(label) and where in found.what, \
        found and found.report()
