"""A finish with tokens in flight under kvfuzz's fake KV connector beside a Mamba "align" group,
under vLLM's AsyncScheduler (`vllm_workloads.MAMBA_ASYNC_CONNECTOR_ABORTS`: requests aborted
between a step's scheduling and its output, freed deferred): the scheduler's
`remove_skipped_blocks(request, computed - in flight)` with up to two steps in flight
(fuzz/kvmanager/flight_finish.py), the deferred free beside the group (align_deferred.py).
Session 0 clean, the same as unguarded, recorded equal and replaying; a scheduler whose finish
does not subtract the tokens in flight caught by the new mapping alone; the lock step without
the older step's tokens diverging; a deferred free popping a block fewer caught. Skips
without vLLM (slow tier)."""

import pytest

import kvfuzz
from tests.helpers import needs_engine
from tests.kvmanager.test_guard import clean_and_replaying

pytestmark = needs_engine("vllm")  # (the slow tier)
WORKLOAD = "MAMBA_ASYNC_CONNECTOR_ABORTS"


class _NotSubtracting:
    """The guarded manager as a scheduler sees it whose `_connector_finished` passes the
    computed tokens, not less those in flight (the request's `num_in_flight_tokens` added back
    to what vLLM 0.33.0 passes, scheduler.py 3369-3374)."""

    def __init__(self, guarded):
        self.__dict__["_guarded"] = guarded

    def __getattr__(self, name):
        return getattr(self._guarded, name)

    def __setattr__(self, name, value):
        setattr(self._guarded, name, value)

    def remove_skipped_blocks(self, request_id, processed_computed_tokens,
                              num_prompt_tokens=None):
        tracked = self._guarded._kvfuzz_requests.get(request_id)
        flying = int(tracked.engine.num_in_flight_tokens or 0) if tracked is not None else 0
        return self._guarded.remove_skipped_blocks(
            request_id, processed_computed_tokens + flying, num_prompt_tokens)


def _session(tmp_path, wrap=lambda guarded: guarded, seed: int = 0):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    return vllm_scheduler.run_session(seed, lambda manager, **settings: wrap(kvfuzz.guard(
        manager, "kvmanager", corpus=tmp_path, **settings)),
        workload=vllm_scheduler.MAMBA_ASYNC_CONNECTOR_ABORTS)


def test_a_finish_with_tokens_in_flight_runs_guarded_and_replays(tmp_path):
    """Session 0: finishes with two steps in flight (the engine's `num_in_flight_tokens` the
    trace's step in flight and the one its last allocation took out), their frees deferred and
    released; clean, the same as unguarded, recorded equal and replaying."""
    from kvfuzz.fuzz.kvmanager import flight_finish

    events = clean_and_replaying(0, WORKLOAD, tmp_path).manager.kvfuzz_session.lock.events
    for reached in (flight_finish.FINISH_IN_FLIGHT, flight_finish.OLDER_IN_FLIGHT,
                    "free deferred (pop_blocks_for_free)", "deferred free released"):
        assert events.get(reached), (reached, events)
    assert not events.get(flight_finish.IGNORED), events
    assert not list(tmp_path.glob("*.json"))


def test_a_finish_not_subtracting_the_tokens_in_flight_is_caught(tmp_path):
    """The scheduler's finish passing its computed tokens: caught at the first finish with
    tokens in flight (the old mapping took it as a finish with none in flight)."""
    with pytest.raises(kvfuzz.Mismatch, match=r"CallMismatch: the lock step removes .*, the "
                                              r"engine r\d+'s at \d+"):
        _session(tmp_path, _NotSubtracting)


def test_without_the_older_step_the_lock_step_diverges(tmp_path, monkeypatch):
    """The lock step subtracting only the trace's step in flight (not the older one whose
    output the engine had not processed) passes another count than the engine's."""
    from kvfuzz.fuzz.kvmanager import align_external, flight_finish

    real = flight_finish.processed_at_finish

    def without_older(lock, op, request):
        return real(lock, type(op)(op.rid), request)
    monkeypatch.setattr(align_external, "processed_at_finish", without_older)
    with pytest.raises(kvfuzz.Mismatch, match=r"CallMismatch: the lock step removes .*, the "
                                              r"engine r\d+'s at \d+"):
        _session(tmp_path)


def _pops_one_block_fewer():
    """vLLM's manager whose `pop_blocks_for_free` (a deferred free's) leaves the last block out:
    it is never returned to the pool."""
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import("vllm"):
        from vllm.v1.core.kv_cache_manager import KVCacheManager

    class PopsOneFewer(KVCacheManager):
        def pop_blocks_for_free(self, request):
            return super().pop_blocks_for_free(request)[:-1]
    return PopsOneFewer


def test_a_deferred_free_beside_the_group_is_judged(tmp_path):
    """The reduced mode's deferred free (`align_deferred.py`): the blocks popped are the tables
    read before the finish; a manager popping one block fewer is caught there."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    with pytest.raises(kvfuzz.Mismatch, match=r"deferred free: pop_blocks_for_free: expected "
                                              r"blocks"):
        vllm_scheduler.run_session(0, lambda manager, **settings: kvfuzz.guard(
            manager, "kvmanager", corpus=tmp_path, **settings),
            workload=vllm_scheduler.MAMBA_ASYNC_CONNECTOR_ABORTS,
            manager_class=_pops_one_block_fewer())
