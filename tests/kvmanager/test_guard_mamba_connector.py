"""The kvmanager guard over kvfuzz's fake KV connector beside a Mamba "align" group under vLLM's
own synchronous scheduler (fuzz/kvmanager/guard_mamba_connector.py,
`vllm_workloads.MAMBA_CONNECTOR`: asynchronous loads only, done or failed whole), judged in the
reduced mode (fuzz/kvmanager/align_external.py): sessions clean, the same as unguarded, their
recordings the guarded trace and replaying clean; each mapping, removed, failing; the catalogue
mutant a finish's `remove_skipped_blocks` alone shows caught with a file that replays; and the
same connector under vLLM's AsyncScheduler (`MAMBA_ASYNC_CONNECTOR`). Skips without vLLM (slow
tier)."""

import pytest

import kvfuzz
from tests import guarding
from tests.helpers import needs_engine
from tests.kvmanager.test_guard import clean_and_replaying, scheduler_session

pytestmark = needs_engine("vllm")  # (the slow tier)
# Sessions 0 and 2: loads done and failed, whole prompts loaded, loads writing some groups
# only, diverged connector lookups, a finish's remove_skipped_blocks freeing states,
# preemptions (sessions 0-99: docs/upstream-vllm.md)
SEEDS = (0, 2)
WORKLOAD = "MAMBA_CONNECTOR"
# a finish's `remove_skipped_blocks` counting a token more processed: where the computed tokens
# end a block, the state a connector sends is freed (unseen at a step: docs/upstream-vllm.md)
FINISH_MUTANT = "mamba_finish_frees_last_state"


def session(seed: int, tmp_path, name: str | None = None, check: bool = True,
            workload: str = WORKLOAD):
    return scheduler_session(seed, name, tmp_path, check, workload=workload)


def test_the_connector_beside_a_mamba_group_runs_guarded_and_replays(tmp_path):
    from kvfuzz.fuzz.kvmanager import align_external as ext

    events: dict = {}
    for seed in SEEDS:
        guarded = clean_and_replaying(seed, WORKLOAD, tmp_path).manager.kvfuzz_session
        assert guarded.header.mamba_mode == "align"
        for name, count in guarded.lock.events.items():
            events[name] = events.get(name, 0) + count
    for reached in (ext.LOAD, ext.DONE, ext.FAILED, ext.WHOLE, ext.RESUMED, ext.LAGGING,
                    ext.SOME, ext.SKIPPED, ext.SKIPPED_FREED):
        assert events.get(reached), (reached, events)
    assert not list(tmp_path.glob("*.json"))


# Session 55: a one-token prompt loaded whole, looked up again 3 times (loaded again twice, then
# its plain step): the only one of sessions 0-99 (docs/upstream-vllm.md)
ONE_TOKEN = 55


def test_a_one_token_prompt_loaded_whole_is_looked_up_again_guarded(tmp_path, monkeypatch):
    """After its whole load the request holds its blocks with no computed token; the scheduler
    looks it up again (`align_external_single.py`): a load again is the trace's `connect`, the
    plain step the reduced mode's resumption (`resume`). Session 55 clean, the same as
    unguarded, recorded equal and replaying; the step mapped as a plain admission
    (`allocate_slots`) is not the lock step's call."""
    from kvfuzz.fuzz.kvmanager import align_external_single as single
    from kvfuzz.fuzz.kvmanager.guard_mamba_connector import MambaConnectorCalls

    events = clean_and_replaying(ONE_TOKEN, WORKLOAD, tmp_path).manager.kvfuzz_session.lock.events
    assert events.get(single.RELOOKED) == 3 and events.get(single.LOADED_AGAIN) == 2, events
    monkeypatch.setattr(MambaConnectorCalls, "_relooked", lambda self, rid: False)
    with pytest.raises(kvfuzz.Mismatch, match=r"CallMismatch: the lock step called resume"):
        session(ONE_TOKEN, tmp_path)


def test_without_the_connector_lookups_mapping_the_judge_fails(tmp_path, monkeypatch):
    """The engine's connector lookup is full attention's own hit, flagged where the Mamba
    state lags: judged as a plain lookup it is a wrong hit; and the live driver must answer the
    reduced mode's `get_computed_blocks` after it from it (the scheduler asks none)."""
    from kvfuzz.fuzz.kvmanager.guard_mamba_connector import MambaConnectorCalls
    from kvfuzz.impl.kvmanager.live import LiveManagerDriver

    with monkeypatch.context() as patched:
        patched.setattr(MambaConnectorCalls, "_connector_lookup_problems",
                        lambda self, rid, blocks, hit, boundary, diverged, cap=-1:
                        self.kvfuzz_session.lock.lookup_problems(rid, (
                            __import__("kvfuzz.impl.kvmanager.reads", fromlist=["_ids"])
                            ._ids(blocks), int(hit), int(boundary))))
        with pytest.raises(kvfuzz.Mismatch, match=r"prefix hit"):
            session(0, tmp_path)

    def popped(self, rid, cap=None):  # the lookup given back once, as without a Mamba group
        found = self.lookups.pop(rid)
        return found if len(found) == 4 else (*found, False)
    monkeypatch.setattr(LiveManagerDriver, "connector_lookup", popped)
    with pytest.raises(kvfuzz.Mismatch, match=r"KeyError"):
        session(0, tmp_path)


def test_without_the_admissions_mapping_the_call_is_not_the_lock_steps(tmp_path, monkeypatch):
    """An admission through the connector with nothing loaded is the reduced mode's plain one
    (`allocate_slots`), not a `connect` call."""
    from kvfuzz.fuzz.kvmanager.guard_mamba_connector import MambaConnectorCalls

    monkeypatch.setattr(MambaConnectorCalls, "_connect_method", lambda self, op: "connect")
    with pytest.raises(kvfuzz.Mismatch, match=r"CallMismatch: the lock step called "
                                              r"allocate_slots"):
        session(0, tmp_path)


def test_without_the_finish_mappings_the_judge_fails(tmp_path, monkeypatch):
    """The finish's `remove_skipped_blocks` is the trace's `remove_skipped`: a manager whose
    call alone (not a step's) frees the state of the last token is caught there; let through
    as no op, only later, at another request's op (the finished request's tables read while
    the connector holds its free back), and a replay would never make the call. A tail held
    wrong is judged at the `finish` (the engine's answer is read there, not asked
    again: it consumes the tail)."""
    from kvfuzz.fuzz.engine.guard import modelled
    from kvfuzz.fuzz.kvmanager.guard_connector import ConnectorCalls
    from kvfuzz.fuzz.kvmanager.guard_mamba_connector import MambaConnectorCalls
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import MAMBA_CONNECTOR, run_session

    def finish_frees_one_more(seed):
        return run_session(seed, lambda manager, **settings: kvfuzz.guard(
            manager, "kvmanager", corpus=tmp_path, **settings), workload=MAMBA_CONNECTOR,
            manager_class=_finish_counts_a_token_more())

    with pytest.raises(kvfuzz.Mismatch, match=r"what +remove_skipped at op \d+"):
        finish_frees_one_more(0)

    @modelled
    def remove_skipped_blocks(self, request_id, processed_computed_tokens,
                              num_prompt_tokens=None):
        return self._kvfuzz_object.remove_skipped_blocks(request_id, processed_computed_tokens,
                                                         num_prompt_tokens)
    with monkeypatch.context() as patched:
        patched.setattr(ConnectorCalls, "remove_skipped_blocks", remove_skipped_blocks)
        with pytest.raises(kvfuzz.Mismatch, match=r"what +mamba states at op \d+ of \d+: "
                                                  r"schedule"):
            finish_frees_one_more(0)

    def wrong_tail(self, request, perform):
        perform()
        tracked = self._kvfuzz_requests[request.request_id]
        self._kvfuzz_driver.__dict__.setdefault("tails", {})[tracked.rid] = [(1, 1, 3)]
    monkeypatch.setattr(MambaConnectorCalls, "_hold_tail", wrong_tail)
    with pytest.raises(kvfuzz.Mismatch, match=r"boundary offload: "
                                              r"finalize_partial_tail_offloads\(r\d+\)"):
        session(0, tmp_path)


def test_a_live_driver_reading_no_zeroing_records_is_caught(tmp_path, monkeypatch):
    """The zeroing records (Mamba layers turn zeroing on) are read since the last read, left
    for the scheduler to drain: a read that shows none fails the external blocks' check."""
    from kvfuzz.impl.kvmanager.live_align import AlignStepReads

    monkeypatch.setattr(AlignStepReads, "take_new_block_ids", lambda self: [])
    # (session 1's first load writes the Mamba group alone: full attention's blocks recorded)
    with pytest.raises(kvfuzz.Mismatch, match=r"zeroing +take_new_block_ids after r\d+'s "
                                              r"admission with external tokens"):
        session(1, tmp_path)


def test_the_finish_mutant_raises_in_a_session_with_a_file_that_replays(tmp_path):
    """`mamba_finish_frees_last_state` (`MambaManager.remove_skipped_blocks` counting a token
    more processed), raised in a session with a file that fails the same way on it and replays
    clean on the release."""
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: session(SEEDS[seed], tmp_path, FINISH_MUTANT),
        f"mutant.vllm.kvmanager.{FINISH_MUTANT}", "vllm.kvmanager", seeds=len(SEEDS))


def test_partial_hits_beside_the_connector_and_a_copys_free_counted(tmp_path, monkeypatch):
    """MAMBA_PARTIAL_CONNECTOR (hashed per 2 tokens of 4): session 3 clean, recorded equal
    and replaying. There the scheduler frees a copy's endpoints (no op) while the pool is near
    full: the lock step's reference counts lose them too, else its next exact count works from
    the endpoints held and expects a decode refused that the engine made."""
    from kvfuzz.fuzz.kvmanager.guard_mamba import CopyRetentions

    run = session(3, tmp_path, workload="MAMBA_PARTIAL_CONNECTOR")
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests
    assert guarded.lock.events["copy-on-write copies taken"], guarded.lock.events
    recorded = session(3, tmp_path, check=False, workload="MAMBA_PARTIAL_CONNECTOR")
    assert recorded.manager.kvfuzz_session.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.manager.kvfuzz_session.save(tmp_path / "recorded"),
                         "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))
    freed = CopyRetentions._retention_freed

    def uncounted(self, blocks):
        lock = self.kvfuzz_session.lock
        counts = list(lock.ref)
        result = freed(self, blocks)
        lock.ref[:] = counts  # the counts of the last state read, the endpoints still held
        return result
    monkeypatch.setattr(CopyRetentions, "_retention_freed", uncounted)
    with pytest.raises(kvfuzz.Mismatch, match=r"None vs success: r\d+: allocate_slots of a "
                                              r"step of 1 tokens after \d+: expected None"):
        session(3, tmp_path, workload="MAMBA_PARTIAL_CONNECTOR")


def _finish_counts_a_token_more():
    """vLLM's manager whose `remove_skipped_blocks` (the scheduler's call at a finish; a step's
    goes to the coordinator) counts one token more processed: where the computed tokens end a
    block, the state of the last token is freed."""
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import("vllm"):
        from vllm.v1.core.kv_cache_manager import KVCacheManager

    class FinishFreesOneMore(KVCacheManager):
        def remove_skipped_blocks(self, request_id, processed_computed_tokens,
                                  num_prompt_tokens=None):
            return super().remove_skipped_blocks(request_id, processed_computed_tokens + 1,
                                                 num_prompt_tokens)
    return FinishFreesOneMore


def test_the_connector_beside_a_mamba_group_under_async_scheduling(tmp_path, monkeypatch):
    """MAMBA_ASYNC_CONNECTOR (MAMBA_CONNECTOR under vLLM's AsyncScheduler): session 0 clean,
    the same as unguarded, recorded equal and replaying; a loaded request's first step is in
    flight as any step (`align_external._flying`): without that the lock step's next
    allocation of it passes no tokens in flight where the engine passes that step's."""
    from kvfuzz.fuzz.kvmanager import align_async, align_external as ext

    name = "MAMBA_ASYNC_CONNECTOR"
    guarded = clean_and_replaying(0, name, tmp_path).manager.kvfuzz_session
    assert guarded.header.async_scheduling and guarded.header.mamba_mode == "align"
    for reached in (ext.LOAD, ext.DONE, ext.RESUMED, align_async.STEP, align_async.READ):
        assert guarded.lock.events.get(reached), (reached, guarded.lock.events)
    assert not list(tmp_path.glob("*.json"))

    monkeypatch.setattr(ext.AlignExternal, "_flying", lambda self, rid, request: None)
    with pytest.raises(kvfuzz.Mismatch, match=r"CallMismatch: the lock step allocates with "
                                              r".*, the engine \d+ tokens, \d+ in flight"):
        session(0, tmp_path, workload=name)
