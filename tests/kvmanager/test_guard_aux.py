"""The caller's cap on a lookup under vLLM's own scheduler (`Workload(aux_outputs=True)`,
`vllm_scheduler.AUX_OUTPUTS`; fuzz/kvmanager/vllm_aux.py): with auxiliary outputs on, every
admission's `get_computed_blocks` carries the auxiliary-output connector's
`max_cache_hit_length`, which the guard writes as the trace's `Schedule.max_hit` and judges by
the full oracle. vLLM's own connector never cuts the manager's hit (its cap counts every block
the GPU's cache holds), so there the catalogue mutant that ignores the cap is equivalent; a
double of the connector's store that keeps less cuts hits, and the guard catches the mutant
there; a manager that takes the cap as exclusive is caught under vLLM's own connector. What the
trace cannot cap is refused by name. The sessions need vLLM (slow)."""

from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.impl.registry import load_attribute
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Schedule
from tests.helpers import with_engine

MUTANT = "mutant.vllm.kvmanager.caller_cap_ignored"
CAP_EVENTS = ("lookup capped by the caller", "hit cut by the caller's cap",
              "admission with a hit", "admission, no hit")


def doubles() -> dict:
    """A manager that takes the caller's cap as exclusive (a block short where the cap is the
    hit), built on first use, never at collection."""
    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class CapExclusive(KVCacheManager):
        def get_computed_blocks(self, request, max_cache_hit_length=None):
            if max_cache_hit_length is not None:
                max_cache_hit_length = max(max_cache_hit_length - 1, 0)
            return super().get_computed_blocks(request, max_cache_hit_length)

    return {"CapExclusive": CapExclusive}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_guard_aux:CapExclusive
    if name == "CapExclusive":
        return doubles()[name]
    raise AttributeError(name)


def session(seed: int, tmp_path, impl: str | None = None, check: bool = True):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    wrap = kvfuzz.guard if check else kvfuzz.record
    options = dict(corpus=tmp_path) if check else {}
    cls = None
    if impl is not None:
        options["impl"] = impl
        cls = load_attribute(impl) if ":" in impl else KVMANAGER.catalogue.resolve(impl).load()
    return vllm_scheduler.run_session(
        seed, lambda manager, **settings: wrap(manager, "kvmanager", **settings, **options),
        manager_class=cls, workload=vllm_scheduler.AUX_OUTPUTS).manager.kvfuzz_session


def keeps_two_blocks(monkeypatch) -> None:
    """The connector's store as a double that keeps a prompt's first two blocks at most (a
    store that lost the rest): its cap then falls below the GPU's hit."""
    from vllm.distributed.aux_output_connector.connector import AuxOutputSchedulerConnector

    original = AuxOutputSchedulerConnector.max_cache_hit
    monkeypatch.setattr(AuxOutputSchedulerConnector, "max_cache_hit", lambda self, request: min(
        original(self, request), 2 * self._block_size))


def counted(sessions) -> dict:
    return {name: sum(s.lock.events[name] for s in sessions) for name in CAP_EVENTS}


@with_engine("vllm")
def test_every_admission_is_capped_guarded_clean_and_the_recording_replays(tmp_path):
    guarded = [session(seed, tmp_path) for seed in range(3)]
    assert all(s.divergence is None for s in guarded)
    events = counted(guarded)
    admissions = events["admission with a hit"] + events["admission, no hit"]
    assert events["lookup capped by the caller"] == admissions and events["admission with a hit"]
    assert any(op.max_hit > 0 for s in guarded for op in s.ops if isinstance(op, Schedule))
    # vLLM 0.33.0's connector counts every block the GPU's cache holds: its cap never cuts
    assert events["hit cut by the caller's cap"] == 0
    recorded = session(0, tmp_path, check=False)
    whole = guarded[0].trace()
    assert recorded.trace() == replace(whole, ops=whole.ops[:len(recorded.ops)])
    recorded.save(tmp_path / "recorded")
    assert not list(tmp_path.glob("*.json"))
    assert kvfuzz.replay(tmp_path / "recorded", impl="vllm.kvmanager").ok


@with_engine("vllm")
def test_the_mutant_ignoring_the_cap_is_equivalent_under_vllms_own_connector(tmp_path):
    assert all(session(seed, tmp_path, MUTANT).divergence is None for seed in range(3))


@with_engine("vllm")
def test_a_store_keeping_less_cuts_hits_and_the_mutant_ignoring_the_cap_is_caught(
        tmp_path, monkeypatch):
    keeps_two_blocks(monkeypatch)
    released = [session(seed, tmp_path) for seed in range(2)]
    assert all(s.divergence is None for s in released)
    assert counted(released)["hit cut by the caller's cap"] > 0
    with pytest.raises(kvfuzz.Mismatch, match="prefix hit") as raised:
        session(0, tmp_path / "mutant", MUTANT)
    saved = raised.value.divergence.saved_path
    assert not kvfuzz.replay(saved, impl=MUTANT).ok
    assert kvfuzz.replay(saved, impl="vllm.kvmanager").ok


@with_engine("vllm")
def test_a_manager_taking_the_cap_as_exclusive_is_caught_with_a_file_that_replays(tmp_path):
    double = f"{__name__}:CapExclusive"
    with pytest.raises(kvfuzz.Mismatch, match="prefix hit") as raised:
        session(0, tmp_path, double)
    saved = raised.value.divergence.saved_path
    assert not kvfuzz.replay(saved, impl=double).ok
    assert kvfuzz.replay(saved, impl="vllm.kvmanager").ok


@with_engine("vllm")
def test_on_capped_hits_traces_the_guards_verdict_is_the_batch_judges(tmp_path):
    """kvfuzz's own driver makes the "capped hits" profile's calls through the guard (the traces
    it models: one block size, no EAGLE; 4 of the first 12, 2026-12-07): the release runs
    clean with its caps written back, and the guard catches the mutant where the batch judge
    does, with a file that fails the same way."""
    from kvfuzz.strategies.kvmanager import capped_hits
    from tests import guarding
    from tests.kvmanager.test_guard import VLLM, guard_models, impl_of, settings

    traces = [guard_models(capped_hits.GENERATOR.generate(0, index)) for index in range(12)]
    modelled = [trace for trace in traces if trace is not None]
    assert len(modelled) >= 3
    capped = 0
    for trace in modelled:
        session = guarding.guarded_run(KVMANAGER, trace, VLLM, tmp_path, settings=settings)
        assert session.divergence is None
        capped += sum(op.max_hit >= 0 for op in session.ops if isinstance(op, Schedule))
        assert KVMANAGER.check(session.trace(), VLLM).status == AGREE  # (its recording)
    assert capped
    caught = guarding.assert_guard_verdicts_are_the_batch_judges(
        KVMANAGER, VLLM, [impl_of("caller_cap_ignored")], tmp_path, traces=12,
        settings=settings, modelled=guard_models,
        generate=lambda index, impl: capped_hits.GENERATOR.generate(0, index))
    assert caught == {MUTANT}


@with_engine("vllm")
def test_a_capped_lookup_is_the_admissions_max_hit_and_what_cannot_be_capped_is_refused(
        tmp_path):
    from tests.kvmanager.test_guard import released_manager

    driver = released_manager()
    guarded = kvfuzz.guard(driver.manager, "kvmanager", corpus=tmp_path)
    driver.arrive(1, list(range(9)))
    request = driver.requests[1]
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"max_cache_hit_length 9: outside 0\.\.8"):
        guarded.get_computed_blocks(request, 9)
    blocks, hit, _ = guarded.get_computed_blocks(request, 4)
    guarded.allocate_slots(request, 9, hit, blocks)
    session = guarded.kvfuzz_session
    assert session.ops[-1] == Schedule(0, 9, max_hit=4) and session.divergence is None
    # (since 2026-12-07, later) a connector's capped lookup and its admission: `connect` with
    # the cap; external tokens that vLLM's `cap_external_hit` drops are refused by name
    driver.arrive(2, list(range(9)))
    second = driver.requests[2]
    blocks, hit, _, _ = guarded.get_computed_blocks_for_connector(second, 4)
    assert hit == 4  # (8 cached: the cap cut it)
    free = driver.manager.block_pool.get_num_free_blocks()
    with pytest.raises(kvfuzz.GuardUnsupported, match="4 external tokens past its hit of 4, "
                                                      "beyond the caller's cap of 4"):
        guarded.allocate_slots(second, 1, hit, blocks, num_external_computed_tokens=4)
    assert driver.manager.block_pool.get_num_free_blocks() == free  # never made
    blocks, hit, _, _ = guarded.get_computed_blocks_for_connector(second, 4)
    guarded.allocate_slots(second, 5, hit, blocks)
    assert session.ops[-1] == Connect(1, 5, 0, max_hit=4) and session.divergence is None
    # a cap once the trace has a connector's ops: the full oracle's (the codec takes it)
    driver.arrive(3, list(range(9)))
    blocks, hit, _ = guarded.get_computed_blocks(driver.requests[3], 8)
    assert hit == 8 and session.divergence is None


def test_auxiliary_outputs_need_the_v2_runner_under_the_asynchronous_scheduler():
    from kvfuzz.fuzz.kvmanager.vllm_aux import aux_output_config
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import AUX_OUTPUTS, Workload

    assert AUX_OUTPUTS.async_scheduling and AUX_OUTPUTS.v2_runner
    for workload in (Workload(aux_outputs=True), Workload(aux_outputs=True,
                                                          async_scheduling=True)):
        with pytest.raises(ValueError, match="V2 model runner"):
            aux_output_config(workload)
    assert aux_output_config(Workload()) == {}
