"""The caller's cap beside a KV connector and a Mamba "align" group under vLLM's own scheduler
(`vllm_workloads.AUX_CONNECTOR`, `AUX_MAMBA`, `AUX_MAMBA_CONNECTOR`,
`AUX_MAMBA_EAGLE_CONNECTOR`: auxiliary outputs on beside kvfuzz's fake connector and a Mamba
group): a connector's capped lookup is the trace's `Connect.max_hit`, the lookups beside the
group the reduced mode's capped ones. vLLM's own auxiliary-output connector never cuts the
manager's hit, so the catalogue's cap mutants are equivalent there; a double of its store that
keeps less cuts hits, and the guard catches them there with files that replay. The sessions
need vLLM (slow)."""

import pytest

import kvfuzz
from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.connector_cap import ALIGN_CUT, CAPPED, KEPT
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Schedule
from tests.helpers import needs_engine
from tests.kvmanager.test_guard_aux import keeps_two_blocks

pytestmark = needs_engine("vllm")  # (the slow tier)

CONNECTOR_CAP = "mutant.vllm.kvmanager.connector_cap_ignored"
CALLER_CAP = "mutant.vllm.kvmanager.caller_cap_ignored"
MARGIN = "mutant.vllm.kvmanager.mamba_connector_eagle_margin_shifted"


def session(seed: int, workload: str, tmp_path, impl: str | None = None, check: bool = True):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler, vllm_workloads

    wrap = kvfuzz.guard if check else kvfuzz.record
    options = dict(corpus=tmp_path) if check else {}
    cls = None
    if impl is not None:
        options["impl"] = impl
        cls = KVMANAGER.catalogue.resolve(impl).load()
    return vllm_scheduler.run_session(
        seed, lambda manager, **settings: wrap(manager, "kvmanager", **settings, **options),
        manager_class=cls, workload=getattr(vllm_workloads, workload)).manager.kvfuzz_session


def keeping_two_blocks(monkeypatch) -> None:
    """`test_guard_aux.keeps_two_blocks`, vLLM's import prepared first (as building a
    scheduler prepares it: a test run alone imports nothing before)."""
    from kvfuzz.fuzz.kvmanager.vllm_build import build_scheduler

    build_scheduler()
    keeps_two_blocks(monkeypatch)


def capped(guarded, kind) -> int:
    return sum(isinstance(op, kind) and op.max_hit >= 0 for op in guarded.ops)


def assert_recorded_and_replaying(guarded, seed: int, workload: str, tmp_path) -> None:
    recorded = session(seed, workload, tmp_path, check=False)
    whole = guarded.trace()
    assert recorded.trace().ops == whole.ops[:len(recorded.ops)]
    assert KVMANAGER.check(recorded.trace(), KVMANAGER.catalogue.resolve(
        "vllm.kvmanager")).status == AGREE


def assert_caught(seed: int, workload: str, impl: str, tmp_path) -> None:
    with pytest.raises(kvfuzz.Mismatch, match="prefix hit") as raised:
        session(seed, workload, tmp_path / "mutant", impl)
    saved = raised.value.divergence.saved_path
    assert not kvfuzz.replay(saved, impl=impl).ok
    assert kvfuzz.replay(saved, impl="vllm.kvmanager").ok


def test_a_connectors_capped_lookups_are_connects_guarded_clean_and_replaying(tmp_path):
    guarded = session(0, "AUX_CONNECTOR", tmp_path)
    assert guarded.divergence is None
    # every connector lookup capped, some external tokens kept under the cap
    assert capped(guarded, Connect) == guarded.lock.events[CAPPED] > 0
    assert guarded.lock.events[KEPT] > 0
    assert_recorded_and_replaying(guarded, 0, "AUX_CONNECTOR", tmp_path)


def test_the_connector_cap_mutant_is_equivalent_under_vllms_store_and_caught_under_less(
        tmp_path, monkeypatch):
    assert session(0, "AUX_CONNECTOR", tmp_path, CONNECTOR_CAP).divergence is None
    keeping_two_blocks(monkeypatch)
    released = session(0, "AUX_CONNECTOR", tmp_path)
    assert released.divergence is None
    assert released.lock.events["hit cut by the caller's cap"] > 0
    assert_caught(0, "AUX_CONNECTOR", CONNECTOR_CAP, tmp_path)


def test_a_guard_dropping_the_cap_calls_the_release_wrong_where_the_cap_cuts(
        tmp_path, monkeypatch):
    """Without the cap in the trace (the lookups judged uncapped) the release is called wrong
    at its first cut lookup, beside the connector and beside the group alike."""
    from kvfuzz.fuzz.kvmanager.guard_steps import AllocationMapping

    keeping_two_blocks(monkeypatch)
    monkeypatch.setattr(AllocationMapping, "_caller_cap", lambda *args: -1)
    for workload in ("AUX_CONNECTOR", "AUX_MAMBA"):
        with pytest.raises(kvfuzz.Mismatch, match="prefix hit"):
            session(0, workload, tmp_path / workload)


def test_capped_lookups_beside_a_mamba_group_guarded_clean(tmp_path, monkeypatch):
    """(Their recordings replaying: sessions 0-99 by hand, docs/upstream-vllm.md; kept out of
    CI's time.)"""
    plain = session(0, "AUX_MAMBA_CONNECTOR", tmp_path)
    assert plain.divergence is None and capped(plain, Connect) and capped(plain, Schedule)
    assert plain.lock.events[ALIGN_CUT] == 0  # (vLLM's own store: no hit cut)
    keeping_two_blocks(monkeypatch)  # (the cap then cuts hits)
    guarded = session(0, "AUX_MAMBA_CONNECTOR", tmp_path)
    assert guarded.divergence is None and guarded.lock.events[ALIGN_CUT] > 0
    # the plain lookup's cap dropped (`caller_cap_ignored`) beside the group: caught there,
    # its file clean on the release (a lookup the cap cut, judged)
    assert_caught(0, "AUX_MAMBA", CALLER_CAP, tmp_path)


def test_the_eagle_margin_mutant_is_equivalent_under_vllms_store_and_caught_under_less(
        tmp_path, monkeypatch):
    assert session(0, "AUX_MAMBA_EAGLE_CONNECTOR", tmp_path, MARGIN).divergence is None
    keeping_two_blocks(monkeypatch)
    assert_caught(0, "AUX_MAMBA_EAGLE_CONNECTOR", MARGIN, tmp_path)  # (clean on the release)
