"""EAGLE's last-block drop beside a Mamba "align" group with a KV connector's ops (since
2026-12-07: `fuzz/kvmanager/align_external_eagle.py`): the "mamba connector" profile draws the
drop in a share of its traces after every other draw (the others as before it; never in `SYNC`)
and the codec reads them back; on the released vLLM its first EAGLE traces run clean, loading,
reporting and resuming under the drop with lookups the drop moved; a judge blind to the drop on
the connector's lookup, or on a load's caching, is wrong there (the release "diverges" from
it), and the two mutants of the connector's per-group lookup (`test_mutants.py`'s ALONE) are
caught; vLLM's scheduler with the fake connector and the drop (`MAMBA_EAGLE_CONNECTOR`) runs
guarded (its padded calls mapped since 2026-12-07, refused by name before). The vLLM parts
are slow."""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.kvmanager import align_connector, align_external_eagle, align_external_pad
from kvfuzz.strategies.kvmanager import mamba_connector, mamba_eagle
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import agreeing_features, divergence, made_and_with_draw_off, needs_engine

COUNT = 60  # seed 0's first traces of the profile read here
FIRST = 8  # the profile's first EAGLE traces of seed 0 the release runs here
BLIND = 4  # the first EAGLE trace of seed 0 (its schedule's connector lookup: hit 0, not 2)


def _vllm(test):
    """The test marked as those that import vLLM are (slow; skipped without it)."""
    for mark in needs_engine("vllm"):
        test = mark(test)
    return test


def _eagle_traces(count: int) -> list:
    traces = (mamba_connector.GENERATOR.generate(0, index) for index in range(200))
    return [trace for trace in traces if trace.eagle][:count]


def test_the_profile_draws_the_drop_last_in_a_share(monkeypatch):
    made, off = made_and_with_draw_off(monkeypatch, mamba_eagle, mamba_connector.GENERATOR,
                                       COUNT)
    eagle = [index for index, trace in enumerate(made) if trace.eagle]
    assert 8 <= len(eagle) <= 25, eagle
    # nothing else moved (multi-module MTP's k, drawn in a share of them after it since
    # 2026-12-07: `test_mamba_connector_mtp.py`)
    assert [replace(trace, eagle=False, prefill_lookahead=0) for trace in made] == off
    assert not any(trace.eagle for trace in off)
    for index in eagle:
        trace = made[index]
        assert not trace.hash_lookahead
        assert any(isinstance(op, Connect) for op in trace.ops)
        assert from_json(to_json(trace)) == trace  # (the codec takes the pair)
    assert not any(mamba_connector.SYNC.generate(0, index).eagle for index in range(COUNT))


@_vllm
def test_the_release_loads_and_resumes_under_the_drop_clean():
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    released = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", released, _eagle_traces(FIRST))
    for event in align_external_eagle.OWN:
        assert events[event], (event, events)
    assert events["config: EAGLE"] == FIRST


@_vllm
def test_a_judge_blind_to_the_drop_on_the_connector_lookup_is_wrong(monkeypatch):
    """Without `eagle` the connector lookup's expectation is full attention's hit before the
    drop: the release, right there, is reported."""
    trace = mamba_connector.GENERATOR.generate(0, BLIND)
    assert trace.eagle and divergence("kvmanager", trace, "vllm.kvmanager") is None
    expectation = align_connector.expectation

    def blind(*args, eagle=False):
        return expectation(*args[:6])
    monkeypatch.setattr(align_connector, "expectation", blind)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what.startswith("prefix hit"), found and found.report()
    assert "get_computed_blocks_for_connector" in found.report()


LOADED = 35  # r2, a 29-token prompt hashed per token loaded whole: op 8, its load done


@_vllm
def test_a_judge_caching_a_load_done_as_without_the_drop_is_wrong(monkeypatch):
    """A load reported done caches with the drop's rules (`cache_blocks`: the cacheable tokens
    and full attention's prompt tail keyed at the prompt's end, EAGLE's limit, not below its
    last token): a judge predicting the connector's caching without `eagle` is wrong on the
    release at the load's report."""
    from kvfuzz.fuzz.kvmanager.align_caching_external import AlignCachingExternal

    trace = mamba_connector.GENERATOR.generate(0, LOADED)
    assert trace.eagle and divergence("kvmanager", trace, "vllm.kvmanager") is None
    for name in ("_caching_admitted", "_caching_loaded"):
        monkeypatch.setattr(AlignCachingExternal, name, _blind(getattr(AlignCachingExternal,
                                                                       name)))
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what == \
        "which blocks cached at op 8 of 216: r2's load done", found and found.report()


def _blind(method):
    def blind(self, *args):
        trace, self.trace = self.trace, replace(self.trace, eagle=False)
        try:
            return method(self, *args)
        finally:
            self.trace = trace
    return blind

# MAMBA_EAGLE_CONNECTOR sessions 0-99 (2026-12-07): 75 clean, 25 refused by name: a padded
# spec-decode admission or resumption under the connector (the guard's refusal beside the
# group, not EAGLE's); mapped since (`align_external_pad.py`): session 5, the first refused,
# clean with its padded step after a load
CLEAN_SESSIONS, PADDED_SESSION = (0, 2), 5


@_vllm
def test_the_fake_connector_with_eagles_drop_runs_guarded_and_replays(tmp_path):
    from tests.kvmanager.test_guard import clean_and_replaying

    events: dict = {}
    for seed in CLEAN_SESSIONS:
        guarded = clean_and_replaying(seed, "MAMBA_EAGLE_CONNECTOR", tmp_path)
        session = guarded.manager.kvfuzz_session
        assert session.header.eagle and session.header.mamba_mode == "align"
        for name, count in session.lock.events.items():
            events[name] = events.get(name, 0) + count
    for event in align_external_eagle.OWN:
        assert events.get(event), (event, events)
    padded = clean_and_replaying(PADDED_SESSION, "MAMBA_EAGLE_CONNECTOR", tmp_path)
    assert padded.manager.kvfuzz_session.lock.events[align_external_pad.PADDED_RESUMPTION]
    assert not list(tmp_path.glob("*.json"))
