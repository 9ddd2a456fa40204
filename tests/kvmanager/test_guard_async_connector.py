"""kvfuzz's fake KV connector under vLLM's asynchronous scheduler (`AsyncScheduler`,
`Workload(async_scheduling=True, fake_connector=True)`: `vllm_scheduler.ASYNC_CONNECTOR`), the
manager guarded (fuzz/kvmanager/guard_async.py, guard_connector.py): loads reported with the
output of a step while the next step is in flight, mapped onto the trace's connector ops beside
its asynchronous ones. The released class runs clean and its recording replays; a connector
mutant raises with a file that replays; a synchronous load's failed block reported with a step
of the request in flight is the trace's `loaded` beneath that step (a lock step ignoring it is
caught), one shared through a prefix hit a `cut` (test_cut_async.py); with draft tokens, padded connector admissions and resumptions hold their rows in flight, and a guard
dropping that is caught. One short session each (vLLM's import dominates)."""

from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import Placeholder, Schedule, Settle
from tests import guarding
from tests.helpers import needs_engine

pytestmark = [*needs_engine("vllm"), pytest.mark.slow]

SEED = 0  # 8 loads (some failing, one of a whole prompt), 4 preemptions, 877 ops


def session(seed: int, tmp_path, name: str | None = None, check: bool = True, **workload):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler
    from tests.kvmanager.test_guard import impl_of

    wrap = kvfuzz.guard if check else kvfuzz.record
    options = dict(impl=impl_of(name).name, corpus=tmp_path) if check else {}
    return vllm_scheduler.run_session(
        seed, lambda manager, **settings: wrap(manager, "kvmanager", **settings, **options),
        workload=replace(vllm_scheduler.ASYNC_CONNECTOR, **workload),
        manager_class=None if name is None else impl_of(name).load())


def test_the_released_manager_runs_clean_under_the_async_scheduler_with_a_connector(tmp_path):
    run = session(SEED, tmp_path)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and guarded.header.async_scheduling
    assert run.finished == run.requests == 10 and run.loads and run.preemptions, run
    ops = guarded.ops
    assert any(isinstance(op, Connect) and op.load for op in ops)
    assert any(isinstance(op, Connect) and op.external and not op.load for op in ops)
    assert any(isinstance(op, Loaded) for op in ops)
    assert {Placeholder, Settle} <= {type(op) for op in ops}
    events = guarded.lock.events
    assert events["load done"] and events["placeholder slot (token in flight)"]
    recorded = session(SEED, tmp_path, check=False).manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


# a connector check's mutant, and one of the padded rows (reached with draft tokens)
@pytest.mark.parametrize("name, drafts", [("delayed_load_cached", 0),
                                          ("spec_pad_rows_clamped", 2)])
def test_a_mutant_raises_under_the_async_scheduler_with_a_file_that_replays(name, drafts,
                                                                            tmp_path):
    spec = dict(speculative="eagle", num_speculative=drafts) if drafts else {}
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: session(seed, tmp_path, name, **spec), f"mutant.vllm.kvmanager.{name}",
        "vllm.kvmanager", seeds=1)


CUT = 2  # one synchronous load failing at a block, reported beneath the request's next step


def test_a_failed_synchronous_load_reported_beneath_a_step_in_flight_runs_clean(tmp_path):
    """vLLM cuts the request's computed tokens to the failed block with its next step still
    counted in flight (`_update_requests_with_invalid_blocks` under `AsyncScheduler`): the
    guard writes `loaded(rid, n)` there, the lock step applies it beneath the step in flight
    (the admission step's output placeholder left unresolved), and the recording replays."""
    run = session(CUT, tmp_path, sync_load_failures=True)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests and run.sync_failures
    assert guarded.lock.events["synchronous load failed beneath a step in flight"] == 1
    assert any(isinstance(op, Loaded) and op.valid > 0 for op in guarded.ops)
    assert kvfuzz.replay(guarded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


def test_a_failed_block_shared_through_a_prefix_hit_is_a_cut(tmp_path):
    """A running request that holds the failed block through a prefix hit (not its own load)
    is cut too, to its computed tokens less the processed step's: refused by name before
    2026-12-06, now the trace's `cut` beneath its step in flight (test_cut_async.py)."""
    from kvfuzz.strategies.kvmanager.connector_ops import Cut

    run = session(5, tmp_path, sync_load_failures=True)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests
    assert [op for op in guarded.ops if isinstance(op, Cut)] == [Cut(3, 49)]


def cut_as_if_synchronous(original):
    """A broken lock step: a failed synchronous load's cut applied as the synchronous
    scheduler's, nothing of the request in flight after it (the step in flight forgotten)."""
    def broken(self, op, request):
        yield from original(self, op, request)
        request.in_flight = 0
    return broken


@pytest.mark.parametrize("broken", ["forgets the step in flight", "ignores the cut"])
def test_a_lock_step_mishandling_the_cut_beneath_the_step_in_flight_is_caught(broken, tmp_path,
                                                                            monkeypatch):
    """Caught at the request's next call (Mismatch: the tokens in flight it passes), or, where
    the lock step ignores the cut, its op then makes another call than the engine's (refused:
    never a pass)."""
    from kvfuzz.fuzz.kvmanager.connector import ConnectorOps

    if broken == "ignores the cut":
        monkeypatch.setattr(ConnectorOps, "_beneath", lambda self, request: False)
        caught = kvfuzz.GuardUnsupported
    else:
        monkeypatch.setattr(ConnectorOps, "_sync_load_failed",
                            cut_as_if_synchronous(ConnectorOps._sync_load_failed))
        caught = kvfuzz.Mismatch
    with pytest.raises(caught):
        session(CUT, tmp_path, sync_load_failures=True)


def test_draft_tokens_padded_under_the_connector_run_clean_with_their_rows_in_flight(tmp_path):
    """With EAGLE's 2 drafts, a synchronous load leaving one token and a resumption after a
    load leaving one are padded (`pad_spec_decode`), their rows counted computed and in flight
    until the output (`rows_in_flight` on the `connect` and on the resumption's `schedule`)."""
    run = session(SEED, tmp_path, speculative="eagle", num_speculative=2)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests == 10, run
    ops = guarded.ops
    assert any(isinstance(op, Connect) and op.pad and op.rows_in_flight for op in ops)
    assert guarded.lock.events["admission padded after its load"]
    assert any(isinstance(op, Schedule) and op.pad and op.rows_in_flight for op in ops)
    assert kvfuzz.replay(guarded.save(tmp_path / "recorded"), "vllm.kvmanager").ok


def drops_the_connects_rows(*args):
    """A broken mapping: a padded `connect` written without its rows in flight."""
    return Connect(*args[:7])


def drops_the_resumptions_rows(rid, chunk, pad=0, rows_in_flight=False):
    """A broken mapping: a padded resumption written without its rows in flight."""
    return Schedule(rid, chunk, pad)


@pytest.mark.parametrize("broken", [drops_the_connects_rows, drops_the_resumptions_rows])
def test_a_guard_dropping_the_padded_rows_in_flight_is_caught(broken, tmp_path, monkeypatch):
    from kvfuzz.fuzz.kvmanager import guard_connector

    name = "Connect" if broken is drops_the_connects_rows else "Schedule"
    monkeypatch.setattr(guard_connector, name, broken)
    with pytest.raises(kvfuzz.Mismatch):
        session(SEED, tmp_path, speculative="eagle", num_speculative=2)


@pytest.mark.parametrize("failures", [False, True])
def test_finding_vllm_leaves_the_failed_steps_output_placeholder(failures, tmp_path,
                                                                  monkeypatch):
    """Finding (vLLM 0.33.0, `AsyncScheduler`; docs/upstream-vllm.md, "A KV connector under
    vLLM's asynchronous scheduler, guarded"): `update_from_output` skips the output of a step
    that reported a failed block of a synchronous load (`failed_kv_load_req_ids`) before
    `_update_request_with_output` resolves its output placeholder, so the request keeps one
    placeholder more than its steps in flight that sample, to its end: the scheduler then
    schedules one position more than the request's tokens every step, and the skipped step's
    sampled token is dropped. After every output, with the batch queue of two, a request has at
    most one step in flight: without the failure no request holds more placeholders than that
    (the control); with it, exactly the request that was cut does, from that output on."""
    import kvfuzz.fuzz.kvmanager.vllm_scheduler  # noqa: F401  (prepares vLLM's import)
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import("vllm"):
        from vllm.v1.core.sched.scheduler import Scheduler
    leaked, cut = [], []
    update, scan = Scheduler.update_from_output, Scheduler._update_requests_with_invalid_blocks

    def spy_scan(self, *args, **kwargs):
        result = scan(self, *args, **kwargs)
        if kwargs.get("evict_blocks", True):  # the running requests' (synchronous loads)
            cut.extend(result[0])
        return result

    def spy_update(self, scheduler_output, model_output):
        result = update(self, scheduler_output, model_output)
        leaked.extend(r.request_id for r in self.running
                      if r.num_output_placeholders > (1 if r.num_in_flight_tokens else 0))
        return result
    monkeypatch.setattr(Scheduler, "update_from_output", spy_update)
    monkeypatch.setattr(Scheduler, "_update_requests_with_invalid_blocks", spy_scan)
    run = session(CUT, tmp_path, check=False, sync_load_failures=failures)
    assert run.finished == run.requests
    if not failures:
        assert not leaked and not cut
        return
    assert len(set(cut)) == 1 and set(leaked) == set(cut) and len(leaked) > 10, (cut, leaked)


HANGS = 58  # a request cut so, at its last output, is never scheduled again


def test_finding_a_request_so_cut_is_never_scheduled_for_its_last_token(monkeypatch):
    """The consequence of the finding above: the running loop skips a request whose last
    token it believes in flight (`num_computed_tokens + 2 - num_output_placeholders >=
    num_prompt_tokens + max_tokens`, `Scheduler.schedule`), which the leaked placeholder makes
    true one token early; the request then never finishes, running with nothing in flight and
    its blocks held (session 58: 9 of 10 requests finished when it stops; without the failures
    all 10 finish in 67 steps)."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import("vllm"):
        from vllm.v1.core.sched.scheduler import Scheduler
    schedulers, schedule = [], Scheduler.schedule

    def spy(self):
        schedulers.append(self)
        return schedule(self)
    monkeypatch.setattr(Scheduler, "schedule", spy)
    workload = replace(vllm_scheduler.ASYNC_CONNECTOR, sync_load_failures=True, max_steps=300)
    ok = vllm_scheduler.run_session(HANGS, workload=replace(workload, sync_load_failures=False))
    assert ok.finished == ok.requests and ok.steps < 100, ok
    run = vllm_scheduler.run_session(HANGS, workload=workload)
    assert run.steps == 300 and run.finished == run.requests - 1, run
    (request,) = schedulers[-1].running
    assert request.num_output_placeholders == 1 and not request.num_in_flight_tokens
    assert request.num_output_tokens == request.max_tokens - 1
    assert request.num_computed_tokens + 2 - request.num_output_placeholders >= \
        request.num_prompt_tokens + request.max_tokens


def test_a_connector_requiring_kv_delivery_changes_nothing_for_a_consumer(tmp_path):
    """`requires_kv_delivery` sets `drop_stale_output` on the running loop's preemptions alone
    (`Scheduler.schedule`); a consumer connector under overlapping batches defers block frees,
    so no preempted request has a step in flight: the same session, op for op."""
    plain = session(SEED, tmp_path).manager.kvfuzz_session
    delivered = session(SEED, tmp_path, kv_delivery=True).manager.kvfuzz_session
    assert delivered.divergence is None and delivered.trace() == plain.trace()


@pytest.mark.parametrize("delivery", [False, True])
def test_a_producers_preemptions_drop_their_stale_output_when_it_requires_delivery(
        delivery, tmp_path):
    """A KV producer alone (no deferred frees): a preempted request's step in flight delivers
    its token late (a stale `sample`), or, where the connector requires KV delivery, the output
    is dropped (no `sample`, its next admission one token shorter): existing ops, clean, and
    the recording replays."""
    run = session(SEED, tmp_path, kv_producer=True, kv_delivery=delivery)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests and run.preemptions
    stale = guarded.lock.events["stale token after a preemption"]
    assert (stale == 0) if delivery else stale, stale
    assert kvfuzz.replay(guarded.save(tmp_path / "recorded"), "vllm.kvmanager").ok


def test_a_failed_synchronous_load_with_draft_tokens_is_refused_by_name(tmp_path):
    """With draft tokens, where a step of the request samples (here a draft step in flight
    beneath the cut), the cut is not mapped yet (`guard_async._drafted`; where none samples
    it is: test_cut_pipeline.py)."""
    with pytest.raises(kvfuzz.GuardUnsupported, match="not mapped with draft tokens"):
        session(4, tmp_path, sync_load_failures=True, speculative="eagle", num_speculative=2)
