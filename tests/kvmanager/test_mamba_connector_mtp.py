"""Multi-module MTP's held-back tokens with EAGLE's drop beside a Mamba "align" group and a KV
connector's ops (since 2026-12-07: `fuzz/kvmanager/align_external_mtp.py`): the "mamba
connector" profile draws k of 2 to min(4, hash unit) in a share of its EAGLE traces after every
other draw (the others as before it) and the codec reads them back, refusing k above the hash
unit still; on the released vLLM its first MTP traces run clean, a load done caching k - 1
tokens short and keying the prompt's tail at its cacheable tokens; a judge blind to the held-back
tokens on a load's caching, or to the copy of a tail keyed there whose entry an eviction dropped,
is wrong there. The vLLM parts are slow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfuzz.fuzz.kvmanager import align_external_mtp
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import mamba_connector, mamba_eagle
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import agreeing_features, divergence, needs_engine

COUNT = 100  # seed 0's first traces of the profile read here (28, 60, 88, 93, 96 with MTP)
FIRST = 4  # the profile's first MTP traces of seed 0 the release runs here
LOADED = 28  # r15's load done at op 165: 6 tokens loaded, k = 2, blocks of 2
EVICTED = 88  # r10's tail keyed at 6 of its 7 loaded tokens, evicted, its copy offered at 159


def _vllm(test):
    """The test marked as those that import vLLM are (slow; skipped without it)."""
    for mark in needs_engine("vllm"):
        test = mark(test)
    return test


def _mtp_traces(count: int) -> list:
    traces = (mamba_connector.GENERATOR.generate(0, index) for index in range(COUNT))
    return [trace for trace in traces if trace.prefill_lookahead >= 2][:count]


def test_the_profile_draws_mtp_last_in_a_share_of_its_eagle_traces(monkeypatch):
    made = [mamba_connector.GENERATOR.generate(0, index) for index in range(COUNT)]
    with monkeypatch.context() as patched:
        patched.setattr(mamba_eagle, "MTP_SHARE", 0.0)
        off = [mamba_connector.GENERATOR.generate(0, index) for index in range(COUNT)]
    mtp = [index for index, trace in enumerate(made) if trace.prefill_lookahead]
    assert mtp == [LOADED, 60, EVICTED, 93, 96], mtp
    assert [replace(trace, prefill_lookahead=0) for trace in made] == off  # nothing else moved
    for index in mtp:
        trace = made[index]
        assert trace.eagle and 2 <= trace.prefill_lookahead <= min(4, trace.hash_size)
        assert any(isinstance(op, Connect) for op in trace.ops)
        assert from_json(to_json(trace)) == trace  # (the codec takes the three)
    # k above the hash unit stays refused (vLLM's scheduler stalls or its manager asserts)
    above = replace(made[LOADED], prefill_lookahead=made[LOADED].hash_size + 1)
    with pytest.raises(FormatError, match="prefill_lookahead.*hash unit with EAGLE"):
        from_json(to_json(above))


@_vllm
def test_the_release_loads_and_resumes_with_tokens_held_back_clean():
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    released = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", released, _mtp_traces(FIRST))
    for event in align_external_mtp.OWN:
        assert events[event], (event, events)
    assert events["config: multi-token prediction (prefill lookahead)"] == FIRST


@_vllm
def test_a_judge_caching_a_load_done_without_the_held_back_tokens_is_wrong(monkeypatch):
    """A load reported done caches k - 1 tokens short (`get_num_cacheable_tokens`): a judge
    predicting it with k = 1 is wrong on the release at the load's report."""
    from kvfuzz.fuzz.kvmanager.align_caching_external import AlignCachingExternal

    trace = mamba_connector.GENERATOR.generate(0, LOADED)
    assert trace.prefill_lookahead == 2
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    loaded = AlignCachingExternal._caching_loaded

    def blind(self, *args):
        trace, self.trace = self.trace, replace(self.trace, prefill_lookahead=0)
        try:
            return loaded(self, *args)
        finally:
            self.trace = trace
    monkeypatch.setattr(AlignCachingExternal, "_caching_loaded", blind)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what == \
        "which blocks cached at op 165 of 220: r15's load done", found and found.report()


@_vllm
def test_a_judge_blind_to_a_held_back_tails_evicted_copy_is_wrong(monkeypatch):
    """The tail a load done keyed at its cacheable tokens (6 of 7), evicted before the
    resumption, whose copy-on-write copy is then offered under no hash: a judge that lets only
    a tail keyed at the computed tokens through reports the release."""
    trace = mamba_connector.GENERATOR.generate(0, EVICTED)
    assert trace.prefill_lookahead == 2
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    monkeypatch.setattr(align_external_mtp.AlignExternalMtp, "copied_tail",
                        lambda self, rid: self.tails.get(rid))
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what.startswith("boundary offload at op 159"), \
        found and found.report()
