"""Every compaction property can fail: each mutant is caught, with a report naming what diverged."""

import pytest

from kvfuzz.fuzz.compaction_diff import run_trace
from kvfuzz.strategies.compaction.trace import Alloc, Flush, Forward, Free, Params, Pick, Trace, \
    generate_trace

SINGLE = Params(total_bytes=8 * 17, epp_up=8, epp_down=8, sink_bytes=8, two_ended=False,
                move_cap=1)

# Two capped non-urgent flushes under one unfired event: two pending batches share it (§3.7).
SHARED_EVENT = Trace(SINGLE, (Alloc("up", 8), Free("up", Pick("bottom", 3)), Forward(),
                              Flush("up", False), Flush("up", False)))
# One urgent flush that moves two pages: their sources must be unbound in p2v.
ONE_FLUSH = Trace(SINGLE, (Alloc("up", 6), Free("up", Pick("bottom", 2)), Flush("up", True)))


@pytest.mark.parametrize("impl, trace, op_index, expected", [
    ("mutant.compaction.pending_replaced", SHARED_EVENT, 4, ["field pending", "I4 pending set"]),
    ("mutant.compaction.p2v_not_cleared", ONE_FLUSH, 2, ["field p2v", "I3 pages outside"]),
])
def test_mutant_is_caught_with_a_readable_report(impl, trace, op_index, expected):
    divergence = run_trace(trace, impl)
    assert divergence is not None, f"{impl} survived"
    report = divergence.report()
    assert divergence.op_index == op_index, report
    assert f"implementation {impl}" in report
    for label in expected:
        assert label in report, report
    assert f"kvfuzz replay corpus/compaction-{trace.trace_id()}.json --impl {impl}" in report


@pytest.mark.parametrize("impl", ["compaction.lazy", "compaction.before"])
def test_the_targeted_traces_pass_on_correct_implementations(impl):
    for trace in (SHARED_EVENT, ONE_FLUSH):
        divergence = run_trace(trace, impl)
        assert divergence is None, divergence.report()


@pytest.mark.parametrize("impl", ["mutant.compaction.pending_replaced",
                                  "mutant.compaction.p2v_not_cleared"])
def test_seeded_traces_kill_the_mutant(impl):
    killed = [index for index in range(40) if run_trace(generate_trace(0, index), impl)]
    assert killed, f"{impl} survived 40 seeded traces"


def test_a_divergence_shrinks_to_a_replayable_corpus_file(tmp_path):
    from kvfuzz.fuzz.compaction_i12 import replay
    from kvfuzz.fuzz.compaction_shrink import save_trace, shrink
    from kvfuzz.strategies.compaction.trace import loads

    impl = "mutant.compaction.p2v_not_cleared"
    trace = next(generate_trace(0, index) for index in range(40)
                 if run_trace(generate_trace(0, index), impl))
    small = shrink(trace, impl)
    assert len(small.ops) < len(trace.ops) and len(small.ops) <= 5, small.ops
    path = save_trace(small, tmp_path)
    assert path.name == f"compaction-{small.trace_id()}.json"
    assert save_trace(small, tmp_path) == path and len(list(tmp_path.iterdir())) == 1
    divergence = replay(loads(path.read_text()), impl)
    assert divergence is not None and f"corpus/{path.name}" in divergence.report()


def test_i12_catches_a_commit_that_forgets_the_kv_move():
    from kvfuzz.fuzz.compaction_i12 import check_i12

    impl = "mutant.compaction.kv_not_moved"
    caught = [index for index in range(20) if check_i12(generate_trace(0, index), lazy=impl)]
    assert caught, f"{impl} survived I12 on 20 traces"
    report = check_i12(generate_trace(0, caught[0]), lazy=impl).report()
    assert "I12" in report and "data differs" in report, report
    assert run_trace(ONE_FLUSH, impl) is not None  # and I7 sees it op by op
