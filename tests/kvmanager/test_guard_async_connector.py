"""kvfuzz's fake KV connector under vLLM's asynchronous scheduler (`AsyncScheduler`,
`Workload(async_scheduling=True, fake_connector=True)`: `vllm_scheduler.ASYNC_CONNECTOR`), the
manager guarded (fuzz/kvmanager/guard_async.py, guard_connector.py): loads reported with the
output of a step while the next step is in flight, mapped onto the trace's connector ops beside
its asynchronous ones. The released class runs clean and its recording replays; a connector
mutant raises with a file that replays; what the trace cannot say yet (a synchronous load's
failed block reported with a step of the request in flight) is refused by name; with draft
tokens, padded connector admissions and resumptions hold their rows in flight, and a guard
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


def test_a_failed_synchronous_load_reported_with_a_step_in_flight_is_refused(tmp_path):
    """vLLM cuts the request's computed tokens with its next step still counted in flight: no
    op says it yet, so the guard refuses it by name (never a silent pass)."""
    with pytest.raises(kvfuzz.GuardUnsupported, match="synchronous KV load's end"):
        session(2, tmp_path, sync_load_failures=True)


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
