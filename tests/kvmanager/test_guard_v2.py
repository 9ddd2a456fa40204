"""vLLM's V2 model runner under its asynchronous scheduler, guarded (`Workload(v2_runner=True)`,
`vllm_scheduler.ASYNC_V2`; fuzz/kvmanager/vllm_async.py). The V2 runner changes the scheduler's
output (resumed requests merged into the new ones', no previous step's ids), never the calls
the manager gets: its sessions run clean, and their recordings equal the V1 runner's. Under a
pipeline of two stages (`pipeline_stages=2`) the scheduler staggers each request's decodes and
the engine's batch queue is three, so a request has two steps in flight (back-to-back prefill
chunks): the trace's `steps_in_flight` 2 maps it (the lock step keeps a request's last two
allocations in flight, `processed` pops the oldest), and a guard not told so refuses it by name.
Needs vLLM (slow), but the workload's own check."""

from dataclasses import replace

import pytest

import kvfuzz
from tests.helpers import with_engine


def session(seed: int, workload, tmp_path, name: str | None = None, check: bool = True):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler
    from tests.kvmanager.test_guard import impl_of

    wrap = kvfuzz.guard if check else kvfuzz.record
    options = dict(impl=impl_of(name).name, corpus=tmp_path) if check else {}
    return vllm_scheduler.run_session(
        seed, lambda manager, **settings: wrap(manager, "kvmanager", **settings, **options),
        manager_class=None if name is None else impl_of(name).load(), workload=workload)


@with_engine("vllm")
@pytest.mark.parametrize("base", ["ASYNC", "ASYNC_SPEC", "ASYNC_CONNECTOR", "ASYNC_STREAMING"])
def test_the_v2_runner_runs_guarded_clean_and_the_manager_sees_what_under_v1(base, tmp_path):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    v1 = getattr(vllm_scheduler, base)
    v2 = replace(v1, v2_runner=True)
    for seed in range(2):
        guarded = session(seed, v2, tmp_path).manager.kvfuzz_session
        assert guarded.divergence is None
        recorded = session(seed, v1, tmp_path, check=False).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
    assert not list(tmp_path.glob("*.json"))


@with_engine("vllm")
@pytest.mark.parametrize("name", ["in_flight_ignored", "window_moves_early"])
def test_a_manager_wrong_about_tokens_in_flight_is_caught_under_the_v2_runner(tmp_path, name):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    with pytest.raises(kvfuzz.Mismatch):
        session(0, vllm_scheduler.ASYNC_V2, tmp_path, name=name)


PIPELINE_BASES = ["ASYNC", "ASYNC_SPEC", "ASYNC_CONNECTOR", "ASYNC_STREAMING"]


@with_engine("vllm")
@pytest.mark.parametrize("base", PIPELINE_BASES)
def test_a_pipelines_second_step_in_flight_is_judged_and_its_recording_replays(base, tmp_path):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler
    from kvfuzz.fuzz.kvmanager.async_ops import PIPELINE_EVENTS

    workload = replace(getattr(vllm_scheduler, base), v2_runner=True, pipeline_stages=2)
    seen = {name: 0 for name in PIPELINE_EVENTS}
    for seed in range(2):
        guarded = session(seed, workload, tmp_path).manager.kvfuzz_session
        assert guarded.divergence is None and guarded.header.steps_in_flight == 2
        for name in seen:
            seen[name] += guarded.lock.events[name]
        recorded = session(seed, workload, tmp_path, check=False).manager.kvfuzz_session
        # (a recording stops at the format's op limit: the guarded session's first ops)
        whole = guarded.trace()
        assert recorded.trace() == replace(whole, ops=whole.ops[:len(recorded.ops)])
        recorded.save(tmp_path / "recorded")
    assert all(seen.values()), seen  # two steps of a request in flight, the older processed
    assert not list(tmp_path.glob("*.json"))
    assert kvfuzz.replay(tmp_path / "recorded", impl="vllm.kvmanager").ok


@with_engine("vllm")
def test_a_guard_not_told_of_the_pipeline_refuses_its_second_step_in_flight(tmp_path):
    from kvfuzz.fuzz.engine.guard import GuardUnsupported
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    def untold(manager, **settings):
        settings.pop("steps_in_flight")
        return kvfuzz.guard(manager, "kvmanager", **settings, corpus=tmp_path)

    with pytest.raises(GuardUnsupported, match="steps_in_flight=1"):
        vllm_scheduler.run_session(0, untold, workload=replace(
            vllm_scheduler.ASYNC_V2, pipeline_stages=2))


@with_engine("vllm")
@pytest.mark.parametrize("wrong", ["forgets the older step", "pops the newest step"])
def test_a_lock_step_wrong_about_a_pipelines_steps_in_flight_is_caught(wrong, tmp_path,
                                                                      monkeypatch):
    from kvfuzz.fuzz.engine.lockstep import Call, handles
    from kvfuzz.fuzz.kvmanager import async_ops, vllm_scheduler
    from kvfuzz.strategies.kvmanager.trace import Processed

    if wrong == "forgets the older step":  # (the guard keeps its own: guard_async.py)
        monkeypatch.setattr(async_ops.AsyncOps, "flown", lambda self, request, tokens: setattr(
            request, "flights", [tokens] if tokens else []))
    else:
        def newest_first(self, op):
            request = self.requests.get(op.rid)
            if request is not None and request.flights:
                request.flights.pop()
                yield Call(f"r{op.rid}'s newest step processed", None, oracle=None)
        monkeypatch.setattr(async_ops.AsyncOps, "processed", handles(Processed)(newest_first))
    with pytest.raises(kvfuzz.Mismatch, match="in flight"):
        session(0, replace(vllm_scheduler.ASYNC_V2, pipeline_stages=2), tmp_path)


def test_a_pipeline_needs_the_v2_runner_and_the_v2_runner_the_asynchronous_scheduler():
    from kvfuzz.fuzz.kvmanager.vllm_async import model_runner
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import Workload

    for workload, match in ((Workload(pipeline_stages=2, async_scheduling=True), "v2_runner"),
                            (Workload(v2_runner=True), "async_scheduling")):
        with pytest.raises(ValueError, match=match):
            with model_runner(workload):
                pass
