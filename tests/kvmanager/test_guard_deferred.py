"""The kvmanager guard over deferred frees (fuzz/kvmanager/guard.py): vLLM's scheduler pops a
request's blocks (`pop_blocks_for_free`) while a step that may write them is in flight, and
frees them on the pool (`block_pool.free_blocks(reversed(blocks))`) once the step is processed.
The guard maps both (`finish`/`preempt` with `defer`, `release`), checked; a pool free that is
no deferred free's is refused before it is made. And the scheduler's `remove_skipped_blocks`
before a connector's `request_finished`, with a sliding window: `remove_skipped`. Skips without
vLLM."""

import random
from collections import Counter
from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager.trace import Finish, Preempt, Release, RemoveSkipped
from tests import guarding
from tests.helpers import needs_engine
from tests.kvmanager.test_guard import guarded_arrival, impl_of
from tests.kvmanager.test_guard_connector import connector_models

pytestmark = needs_engine("vllm")
DEFERRED_MUTANTS = ("deferred_free_reversed", "deferred_free_first_group_only",
                    "finished_window_kept")


def test_a_deferred_free_is_checked_and_a_stray_pool_free_refused(tmp_path):
    """By hand: a request's free deferred, then its blocks freed on the pool through the
    manager, each an op of the guard's trace; a pool free of other blocks is refused with
    nothing freed."""
    manager, guarded, request, blocks, hit = guarded_arrival(tmp_path, 9)
    guarded.allocate_slots(request, 9, hit, blocks)
    held = list(manager.block_pool.blocks[5:7])
    free = manager.block_pool.get_num_free_blocks()
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"free_blocks of 2 blocks that are not "
                                                      r"a deferred free's"):
        guarded.block_pool.free_blocks(held)
    assert manager.block_pool.get_num_free_blocks() == free  # never made
    request.status = type(request.status).FINISHED_ABORTED
    popped = guarded.pop_blocks_for_free(request)
    assert [b.block_id for b in popped] == [1, 2, 3]
    assert manager.block_pool.get_num_free_blocks() == free  # held until released
    guarded.block_pool.free_blocks(reversed(popped))
    assert manager.block_pool.get_num_free_blocks() == free + 3
    ops = guarded.kvfuzz_session.ops
    assert ops[-2:] == [Finish(0, defer=True), Release(0)] and \
        guarded.kvfuzz_session.divergence is None
    assert kvfuzz.replay(guarded.kvfuzz_session.save(tmp_path / "saved"), "vllm.kvmanager").ok


def test_remove_skipped_blocks_with_a_window_is_checked(tmp_path):
    """By hand, beside a sliding window of 6 tokens: the scheduler's `remove_skipped_blocks` of
    a request at its computed tokens less those in flight (none here) is `remove_skipped` (the
    window's head freed, checked); at other tokens the lock step's call differs (since
    2026-12-07 the guard leaves the processed count to the lock step to judge, as it must for
    an abort's tokens in flight, `flight_finish.py`): a divergence naming both counts, with
    nothing freed."""
    def computed_30(corpus):
        manager, guarded, request, blocks, hit = guarded_arrival(corpus, 30, blocks=20,
                                                                 window=6)
        guarded.allocate_slots(request, 16, hit, blocks)
        request.num_computed_tokens = 16
        guarded.allocate_slots(request, 14, 0, None)
        request.num_computed_tokens = 30
        return manager, guarded, request

    manager, guarded, request = computed_30(tmp_path / "wrong")
    free = manager.block_pool.get_num_free_blocks()
    with pytest.raises(Mismatch, match=r"the lock step removes \(0, 30\), the engine r0's at 29"):
        guarded.remove_skipped_blocks(request.request_id, 29, 30)
    assert manager.block_pool.get_num_free_blocks() == free  # never made
    manager, guarded, request = computed_30(tmp_path / "right")
    free = manager.block_pool.get_num_free_blocks()
    guarded.remove_skipped_blocks(request.request_id, 30, 30)
    assert manager.block_pool.get_num_free_blocks() > free
    assert guarded.kvfuzz_session.ops[-1] == RemoveSkipped(0)
    assert guarded.kvfuzz_session.divergence is None
    assert kvfuzz.replay(guarded.kvfuzz_session.save(tmp_path / "saved"), "vllm.kvmanager").ok


def deferring_session(seed: int, wrap, manager_class=None):
    """vLLM's scheduler deferring its frees (`defer_block_free`), one step in ten with a
    request aborted while it is in flight."""
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import Workload, run_session

    return run_session(seed, wrap, workload=Workload(deferred_aborts=0.1),
                       manager_class=manager_class)


@pytest.mark.slow
def test_vllms_scheduler_deferring_frees_runs_guarded_and_its_record_replays(tmp_path):
    kinds = Counter()
    for seed in range(3):
        session = deferring_session(seed, lambda manager, **settings: kvfuzz.guard(
            manager, "kvmanager", corpus=tmp_path, **settings))
        guarded = session.manager.kvfuzz_session
        assert guarded.divergence is None and session.finished == session.requests
        deferred = [op for op in guarded.ops if isinstance(op, (Finish, Preempt)) and op.defer]
        assert len(deferred) == session.deferred
        kinds.update(type(op).__name__ for op in guarded.ops)
        recorded = deferring_session(seed, lambda manager, **settings: kvfuzz.record(
            manager, "kvmanager", **settings)).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert kinds["Release"], kinds  # (a preemption is never deferred: its step was processed)
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.slow
def test_a_deferred_free_mutant_raises_in_vllms_scheduler_with_a_file_that_replays(tmp_path):
    name = "deferred_free_reversed"
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: deferring_session(seed, lambda manager, **settings: kvfuzz.guard(
            manager, "kvmanager", impl=impl_of(name).name, corpus=tmp_path, **settings),
            impl_of(name).load()), f"mutant.vllm.kvmanager.{name}", "vllm.kvmanager", seeds=3)


def deferred_trace(index: int, impl):
    from kvfuzz.strategies.kvmanager import deferred

    return deferred.build(random.Random(f"guard deferred {index}"), 120)


@pytest.mark.slow
def test_on_kvfuzzs_deferred_traces_the_guards_verdict_is_the_batch_judges(tmp_path):
    """The "deferred frees" profile's traces (as far as the guard models them: no zeroing,
    events, stats or chunked-local groups) made through the guard: it diverges where the batch
    judge does, on each mutant (the group's one and the window's removal beside a sliding
    window)."""
    caught = guarding.assert_guard_verdicts_are_the_batch_judges(
        KVMANAGER, impl_of(None), [impl_of(name) for name in DEFERRED_MUTANTS], tmp_path,
        traces=40, settings=lambda kwargs: {"max_in_flight_tokens": kwargs.get(
            "max_in_flight_tokens")}, modelled=connector_models, generate=deferred_trace)
    assert {name.rsplit(".", 1)[1] for name in caught} == set(DEFERRED_MUTANTS), caught
