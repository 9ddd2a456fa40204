"""Settles beside a Mamba "align" group (issue 24, 2026-12-07): which blocks a settle caches,
predicted (`fuzz/kvmanager/align_caching_settle.py`), and the preemption vLLM's running loop
makes after a refused allocation (`preempt` with `refused`, `mamba_async.preempted_on_refusal`),
so that no settle follows a refusal. Slow where it imports vLLM."""

from pathlib import Path

import pytest

from kvfuzz.strategies.kvmanager import mamba_async
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.trace import (Arrive, Placeholder, Preempt, Processed, Sample,
                                               Schedule, Settle, Trace, to_json)
from tests.helpers import divergence, loads, with_engine, without_align_caching_check

_ENGINE = with_engine("vllm")
# `mamba_align_settle_one_token_long` shrunk from "mamba align" index 35: r3's settle after
# its output, one token short of its second block's end (caught by this check alone)
SHRUNK = Path(__file__).parents[2] / "corpus" / "kvmanager-1167d6530a26dd1c.json"
MUTANT = "mutant.vllm.kvmanager.mamba_align_settle_one_token_long"


def _trace(ops, blocks=12, **more) -> Trace:
    return Trace(blocks, 2, 0, 1024, tuple(ops), None, async_scheduling=True,
                 mamba_mode="align", **more)  # (dense retention: no chunk cut)


def test_a_refused_preemption_round_trips_and_is_left_out_when_off():
    trace = _trace([Arrive(1, (3, 4, 5)), Preempt(1, refused=True), Preempt(1)])
    ops = to_json(trace)["ops"]
    assert ops[1] == {"op": "preempt", "rid": 1, "refused": True}
    assert ops[2] == {"op": "preempt", "rid": 1}  # (the other traces' bytes unchanged)
    assert from_json(to_json(trace), "test") == trace


def test_each_output_gets_the_refusals_branch_and_a_placeholders_the_admission_again():
    ops = [Arrive(1, (3, 4, 5)), Schedule(1, 10), Placeholder(1), Sample(1, 7), Settle(1),
           Processed(1), Sample(1, 8), Sample(1, 9), Arrive(2, (3,))]
    made = mamba_async.preempted_on_refusal(_trace(ops)).ops
    assert made == (Arrive(1, (3, 4, 5)), Schedule(1, 10), Placeholder(1),
                    Preempt(1, refused=True), Sample(1, 7, stale=True), Sample(1, 7), Settle(1),
                    Schedule(1, mamba_async.READMITTED), Processed(1))  # (cut to 9 ops)
    # with drafts, no admission again (`drafted`'s own shapes follow); Processed's output
    drafted = mamba_async.preempted_on_refusal(_trace(ops, mamba_speculative=1)).ops
    assert Schedule(1, mamba_async.READMITTED) not in drafted
    assert drafted[-2:] == (Processed(1), Preempt(1, refused=True))  # (cut to 9 ops)


@pytest.mark.slow
@_ENGINE
def test_a_refused_preemption_applies_only_after_a_refusal():
    """Three blocks: r1's 4 tokens take two of full attention's and a state; its placeholder
    needs a third of full attention's and is refused, so the `preempt` with `refused` applies
    (its stale token comes, the output's own ops resolve to nothing); with room, the placeholder
    is made and the preemption resolves to nothing, the output settled and its caching
    judged."""
    from kvfuzz.fuzz.targets import TARGETS
    from kvfuzz.fuzz.kvmanager import align_caching_settle
    from kvfuzz.fuzz.kvmanager.free_ops import PREEMPTED_BY_REFUSAL

    ops = [Arrive(1, (3, 4, 5, 6)), Schedule(1, 10), Placeholder(1),
           Preempt(1, refused=True), Sample(1, 7, stale=True), Sample(1, 7), Settle(1)]
    target = TARGETS["kvmanager"]
    released = target.catalogue.resolve("vllm.kvmanager")
    counted = {}
    for blocks in (4, 12):
        outcome = target.check(_trace(ops, blocks=blocks), released)
        assert outcome.status == "agree", outcome.divergence
        counted[blocks] = outcome.features
    tight, room = counted[4], counted[12]
    assert tight[PREEMPTED_BY_REFUSAL] == 1 and tight["stale token after a preemption"] == 1
    assert not tight[align_caching_settle.JUDGED]
    assert not room[PREEMPTED_BY_REFUSAL] and room["sample, no slot"] == 1
    assert room[align_caching_settle.JUDGED] == 1


@pytest.mark.slow
@_ENGINE
def test_a_settle_caching_one_token_long_is_caught_only_by_this_check(monkeypatch):
    """The shrunk case: the release agrees (its settle's caching predicted), the mutant is
    caught by the caching check, and with that check off it survives."""
    trace = loads(SHRUNK.read_text())
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, MUTANT)
    assert found is not None and found.what.startswith("which blocks cached"), found
    without_align_caching_check(monkeypatch)
    assert divergence("kvmanager", trace, MUTANT) is None
