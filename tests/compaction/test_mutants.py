"""Every compaction property can fail: each mutant is caught, with a report naming what diverged."""

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.compaction.target import COMPACTION
from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.strategies.compaction.generator import generate
from kvfuzz.strategies.compaction.trace import (Alloc, Clear, Drain, Fire, Flush, Forward, Free,
                                                Params, Pick, Trace)
from tests.compaction.sides import i12, op_by_op, run_trace
from tests.helpers import divergence

SINGLE = Params(total_bytes=8 * 17, epp_up=8, epp_down=8, sink_bytes=8, two_ended=False,
                move_cap=1)

# Two capped non-urgent flushes under one unfired event: two pending batches share it (§3.7).
SHARED_EVENT = Trace(SINGLE, (Alloc("up", 8), Free("up", Pick("bottom", 3)), Forward(),
                              Flush("up", False), Flush("up", False)))
# One urgent flush that moves two pages: their sources must be unbound in p2v.
ONE_FLUSH = Trace(SINGLE, (Alloc("up", 6), Free("up", Pick("bottom", 2)), Flush("up", True)))
# A clear while a move batch waits on an unfired event: the cleared pool holds nothing pending.
CLEAR_PENDING = Trace(SINGLE, (Alloc("up", 6), Forward(), Free("up", Pick("bottom", 2)),
                               Flush("up", False), Clear(), Fire(), Drain("up", False),
                               Alloc("up", 3)))


@pytest.mark.parametrize("impl, trace, op_index, expected", [
    ("mutant.compaction.pending_replaced", SHARED_EVENT, 4, ["field pending", "I4 pending set"]),
    ("mutant.compaction.p2v_not_cleared", ONE_FLUSH, 2, ["field p2v", "I3 pages outside"]),
    ("mutant.compaction.clear_keeps_pending", CLEAR_PENDING, 4,
     ["field pending", "I3 pending pages outside the span"]),
])
def test_mutant_is_caught_with_a_readable_report(impl, trace, op_index, expected):
    found = divergence("compaction", trace, impl)
    assert found is not None, f"{impl} survived"
    report = found.report()
    assert found.step == op_index, report
    assert f"implementation {impl}" in report
    for label in expected:
        assert label in report, report
    assert f"kvfuzz replay corpus/compaction-{trace.trace_id()}.json --impl {impl}" in report


@pytest.mark.parametrize("impl", ["compaction.lazy", "compaction.before"])
def test_the_targeted_traces_pass_on_correct_implementations(impl):
    for trace in (SHARED_EVENT, ONE_FLUSH, CLEAR_PENDING):
        found = divergence("compaction", trace, impl)
        assert found is None, found.report()


@pytest.mark.parametrize("impl", ["mutant.compaction.pending_replaced",
                                  "mutant.compaction.p2v_not_cleared",
                                  "mutant.compaction.clear_keeps_pending",
                                  "mutant.compaction.clear_keeps_group"])
def test_seeded_traces_kill_the_mutant(impl):
    killed = any(op_by_op(generate(0, index), impl) for index in range(40))  # the first will do
    assert killed, f"{impl} survived 40 seeded traces"


def test_a_divergence_shrinks_to_a_replayable_corpus_file(tmp_path):
    impl = "mutant.compaction.p2v_not_cleared"
    found = next(found for found in (divergence("compaction", generate(0, index), impl)
                                     for index in range(40)) if found)
    small = shrink(COMPACTION, found)
    assert len(small.input.ops) < len(found.input.ops) and len(small.input.ops) <= 5
    path = corpus.save(COMPACTION, small.input, tmp_path)
    assert path.name == f"compaction-{small.input.trace_id()}.json"
    assert corpus.save(COMPACTION, small.input, tmp_path) == path
    assert len(list(tmp_path.iterdir())) == 1
    again = divergence("compaction", corpus.load(path)[1], impl)
    assert again is not None and f"corpus/{path.name}" in again.report()


def test_i12_catches_a_commit_that_forgets_the_kv_move():
    impl = "mutant.compaction.kv_not_moved"
    caught = [index for index in range(20) if i12(generate(0, index), lazy=impl)]
    assert caught, f"{impl} survived I12 on 20 traces"
    problems = "\n".join(i12(generate(0, caught[0]), lazy=impl))
    assert "I12" in problems and "data differs" in problems, problems
    assert op_by_op(ONE_FLUSH, impl) is not None  # and I7 sees it op by op


def _built_with_a_bound_row(params, device: str = "cpu"):
    """A test double: a pool built with vid 3 bound to page 5 (a clear() that left its table as
    it was). Ops pick pages from the implementation's live vids, so the judge must see this
    before the first op, not ask the oracle to free a vid it never handed out."""
    from kvfuzz.impl.compaction.allocator import lazy  # imports torch

    side = lazy(params, device)
    side.pools["up"].v2p[3] = 5
    return side


def test_the_state_as_built_is_compared_before_the_first_op():
    problems = run_trace(Trace(SINGLE, (Free("up", Pick("all")),)), _built_with_a_bound_row)
    assert problems is not None, "a pool built with a bound vid agreed"
    assert any("field v2p differs at [3]" in problem for problem in problems), problems
