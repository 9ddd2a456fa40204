"""The trace's `cut` op (`connector_ops.Cut`): vLLM's synchronous scheduler sets a running
request's computed tokens back for a failed KV block it holds without a synchronous load of its
own there (`_update_requests_with_invalid_blocks`). Its JSON field and what the lock step does
with it (`fuzz/kvmanager/cut.py`); the "connector cuts" profile that makes it
(`strategies/kvmanager/connector_cuts.py`); the guard's mapping of it under vLLM's own
scheduler (`guard_connector._sync_load_failed`): sessions once refused now clean and replaying,
a cut outside the scheduler's rule refused, a lock step ignoring the cut and a manager evicting
the cut request's blocks caught. The vLLM parts skip without vLLM."""

from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import connector_cuts
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Cut, Loaded
from kvfuzz.strategies.kvmanager.describe import describe_op
from kvfuzz.strategies.kvmanager.trace import Arrive, Decode, Schedule, Trace, to_json
from tests.helpers import double, with_engine

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)

# r1's 12 tokens computed (3 blocks of 4, cached), then cut: to a block's start, or anywhere
CUT_TRACE = Trace(16, 4, 0, 64, (Arrive(1, tuple(range(1, 13))), Schedule(1, 12), Cut(1, 4),
                                 Schedule(1, 8), Decode(1, 99)))
# sessions of vLLM's synchronous scheduler with the fake connector failing synchronous loads at
# a block (`replace(FAKE_CONNECTOR, sync_load_failures=True)`) that cut another request: 22 set
# back to its tokens before the step (r9 to 62), 35 to a failed block's start (r5 to 80)
BACK, TO_BLOCK = 22, 35


def test_a_cut_reads_back_and_says_what_it_is():
    data = to_json(CUT_TRACE)
    assert data["ops"][2] == {"op": "cut", "rid": 1, "to": 4}
    assert from_json(data, "t") == CUT_TRACE
    assert describe_op(Cut(1, 4)) == "r1's computed tokens cut to 4 (a failed block it holds)"
    data["ops"][2]["to"] = -1
    with pytest.raises(FormatError, match=r"ops\[2\]\.to"):
        from_json(data, "t")
    data["ops"][2].pop("to")
    with pytest.raises(FormatError, match=r"ops\[2\]\.to"):
        from_json(data, "t")


def test_the_profile_cuts_other_requests_after_a_failed_synchronous_load():
    traces = [connector_cuts.GENERATOR.generate(0, index) for index in range(30)]
    assert all(t.note == "profile connector cuts" and not t.window for t in traces)
    ops = [op for t in traces for op in t.ops]
    after_sync = [b for a, b in zip(ops, ops[1:]) if isinstance(a, Connect) and not a.load]
    assert any(isinstance(op, Loaded) and op.valid >= 0 for op in after_sync)
    cuts = [op for op in ops if isinstance(op, Cut)]
    assert any(op.to % 4 for op in cuts) and any(op.to and not op.to % 8 for op in cuts)
    assert all(from_json(to_json(t)) == t for t in traces)


@with_vllm
def test_the_released_class_keeps_a_cut_requests_blocks_and_a_manager_evicting_them_is_caught():
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER
    from tests.kvmanager.test_guard import impl_of

    outcome = KVMANAGER.check(CUT_TRACE, impl_of(None))
    assert outcome.status == "agree", outcome.divergence and outcome.divergence.report()
    assert outcome.features["computed tokens cut to a failed block's start"] == 1
    broken = double("kvmanager", "tests.kvmanager.test_guard_connector:EvictsRewoundBlocks")
    caught = KVMANAGER.check(CUT_TRACE, broken)
    assert caught.status == "diverge" and caught.divergence.step == 3, caught
    # a cut past the request's computed tokens, of a waiting request, or beside a second
    # group (whose failed blocks vLLM refuses): nothing, so the manager's eviction is not asked
    for nothing in (replace(CUT_TRACE, ops=CUT_TRACE.ops[:2] + (Cut(1, 13),) + CUT_TRACE.ops[3:]),
                    replace(CUT_TRACE, window=8)):
        assert KVMANAGER.check(nothing, broken).status == "agree"


def sync_failing(seed: int, wrap, manager_class=None):
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import FAKE_CONNECTOR, run_session

    return run_session(seed, wrap, workload=replace(FAKE_CONNECTOR, sync_load_failures=True),
                       manager_class=manager_class)


@with_vllm
@pytest.mark.slow
@pytest.mark.parametrize("seed, to", [(BACK, 62), (TO_BLOCK, 80)])
def test_a_request_cut_by_a_failed_block_it_holds_runs_guarded_and_replays(seed, to, tmp_path):
    run = sync_failing(seed, lambda m, **s: kvfuzz.guard(m, "kvmanager", corpus=tmp_path, **s))
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests
    assert [op.to for op in guarded.ops if isinstance(op, Cut)] == [to]
    recorded = sync_failing(seed, lambda m, **s: kvfuzz.record(m, "kvmanager", **s))
    assert recorded.manager.kvfuzz_session.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.manager.kvfuzz_session.save(tmp_path / "r"),
                         "vllm.kvmanager").ok


@with_vllm
@pytest.mark.slow
def test_a_lock_step_ignoring_the_cut_is_caught(tmp_path, monkeypatch):
    from kvfuzz.fuzz.kvmanager.cut import CutOps

    def ignored(self, op):
        yield from ()

    ignored._handles = (Cut,)
    monkeypatch.setattr(CutOps, "cut", ignored)
    with pytest.raises((kvfuzz.Mismatch, kvfuzz.GuardUnsupported)):
        sync_failing(BACK, lambda m, **s: kvfuzz.guard(m, "kvmanager", corpus=tmp_path, **s))


@with_vllm
def test_a_cut_outside_the_schedulers_rule_is_refused(tmp_path):
    """Set back to neither its computed tokens before its last step nor a block's start:
    refused before the call; to a block below them: a `cut`, checked."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver
    from tests.kvmanager.test_guard import impl_of

    for computed, made in ((5, None), (8, Cut(0, 8)), (4, Cut(0, 4))):
        driver = KVManagerDriver(impl_of(None).load(), 16, 4, 0, 64)
        guarded = kvfuzz.guard(driver.manager, "kvmanager", corpus=tmp_path)
        driver.arrive(1, list(range(1, 13)))
        request = driver.requests[1]
        blocks, hit = guarded.get_computed_blocks(request)[:2]
        guarded.allocate_slots(request, 8, hit, blocks)
        request.num_computed_tokens = 8
        guarded.allocate_slots(request, 4)
        request.num_computed_tokens = computed
        if made is None:
            with pytest.raises(kvfuzz.GuardUnsupported, match="neither its computed tokens"):
                guarded.allocate_slots(request, 12 - computed)
            continue
        guarded.allocate_slots(request, 12 - computed)
        assert guarded.kvfuzz_session.divergence is None
        assert made in guarded.kvfuzz_session.ops
