"""The caller's cap beside HiSparse's groups (the "capped hisparse" profile,
`strategies/kvmanager/capped_hisparse.py`; the judge's part: `fuzz/kvmanager/hisparse_cap.py`):
vLLM 0.33.0 hands the cap to the manager's lookup, which bounds the source group's retained
host hit with the hit; a second connector's import keeps its tokens only where they end on a
block within the cap. A prompt met again hits up to the cap on the release; the catalogue's
cap mutants reach HiSparse's lookups and are caught there; a judge blind to the cap reports the
release where the exact hit is modelled (beside a Mamba group). The vLLM tests skip without
vLLM (and are slow)."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.kvmanager import hisparse_cap
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager import capped_hisparse, codec, streams
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Schedule, to_json
from tests.helpers import agreeing_features, divergence, with_engine

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)

PROMPT = list(range(100, 114))  # 14 tokens
BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 16, "block_size": 4, "window": 0,
        "max_model_len": 64, "hisparse": 16}


def met_again(max_hit: int, **more) -> dict:
    """9 tokens computed, decoded twice (its write-backs reported) and finished, then the
    14-token prompt starting with them admitted, its lookup capped at `max_hit`."""
    return BASE | more | {"ops": [
        {"op": "arrive", "rid": 1, "tokens": PROMPT[:9]},
        {"op": "schedule", "rid": 1, "chunk": 9},
        {"op": "decode", "rid": 1, "token": PROMPT[9]},
        {"op": "decode", "rid": 1, "token": PROMPT[10]},
        {"op": "finish", "rid": 1},
        {"op": "arrive", "rid": 2, "tokens": PROMPT},
        {"op": "schedule", "rid": 2, "chunk": 14, "max_hit": max_hit}]}


def test_a_cap_beside_hisparse_is_read_and_the_profile_round_trips():
    assert codec.from_json(met_again(8)).ops[-1].max_hit == 8
    assert "max_hit" not in to_json(codec.from_json(met_again(-1)))["ops"][-1]
    trace = capped_hisparse.GENERATOR.generate(0, 0)
    assert trace.hisparse and codec.from_json(to_json(trace)) == trace


def test_the_profile_is_made_alone_only_and_caps_its_admissions():
    assert "capped hisparse" in streams.ALONE_ONLY and "capped hisparse" in streams.profiles()
    traces = [capped_hisparse.GENERATOR.generate(0, index) for index in range(20)]
    assert all(t.note == "profile capped hisparse" and t.hisparse for t in traces)
    caps = [op.max_hit for t in traces for op in t.ops if isinstance(op, (Connect, Schedule))]
    assert 0.6 < sum(cap >= 0 for cap in caps) / len(caps) < 0.8  # capped_connector.SHARE
    assert any(isinstance(op, Connect) and op.max_hit >= 0 for t in traces for op in t.ops)
    assert any(t.mamba_mode == "align" for t in traces)  # "hisparse cow"'s base


@with_vllm
@pytest.mark.parametrize("max_hit, hit", [(-1, 8), (13, 8), (8, 8), (7, 4), (4, 4), (3, 0),
                                          (0, 0)])
def test_a_prompt_met_again_beside_hisparse_hits_up_to_the_cap(max_hit, hit):
    trace = codec.from_json(met_again(max_hit))
    events = agreeing_features("kvmanager", KVMANAGER.catalogue.resolve("vllm.kvmanager"),
                               [trace])
    assert events["admission with a hit"] == (hit > 0)
    assert events[hisparse_cap.CAPPED] == (max_hit >= 0)
    assert bool(events[hisparse_cap.CUT]) == (0 <= max_hit < 8)
    # the catalogue's cap mutant: the same lookup past the cap
    found = divergence("kvmanager", trace, "mutant.vllm.kvmanager.caller_cap_ignored")
    assert (found is not None) == (0 <= max_hit < 8), max_hit
    if found is not None:
        assert f"expected {max_hit} tokens at most (the caller's cap" in found.report(), \
            found.report()


def __getattr__(name):  # the double by import path: tests.kvmanager.test_capped_hisparse:...
    if name != "HostHitPastCap":
        raise AttributeError(name)
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class HostHitPastCap(KVCacheManager):  # the source group's host lookup blind to the cap
        def get_computed_blocks(self, request, max_cache_hit_length=None):
            blocks, hit, boundary = super().get_computed_blocks(request, max_cache_hit_length)
            if max_cache_hit_length is None:
                return blocks, hit, boundary
            longer = super().get_computed_blocks(request)[0].blocks[0]
            return self.create_kv_cache_blocks((longer, *blocks.blocks[1:])), hit, boundary
    return HostHitPastCap


@with_vllm
@pytest.mark.parametrize("max_hit", [7, 4])
def test_a_host_hit_past_the_cap_is_caught(max_hit):
    """The cap check's other half: the source's retained host blocks within the cap, where
    the hit itself is (uncapped, the source holds 2 blocks; capped at 7 or 4, 1)."""
    trace = codec.from_json(met_again(max_hit))
    found = divergence("kvmanager", trace, f"{__name__}:HostHitPastCap")
    assert found is not None and "at most 1 source blocks" in found.report(), \
        found and found.report()
    assert divergence("kvmanager", codec.from_json(met_again(8)),
                      f"{__name__}:HostHitPastCap") is None


@with_vllm
def test_a_judge_blind_to_the_cap_beside_a_mamba_group_reports_the_release(monkeypatch):
    """Beside a Mamba "align" group ("hisparse cow") the exact hit is modelled: a judge
    whose limit ignores the cap (and whose cap check is off) expects the uncapped hit."""
    trace = capped_hisparse.GENERATOR.generate(0, 15)  # seed 0's first such trace the cap cuts
    assert trace.mamba_mode == "align"
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    monkeypatch.setattr(hisparse_cap.HiSparseCap, "lookup_limit",
                        lambda self, request: max(len(request.tokens) - 1, 0))
    monkeypatch.setattr(hisparse_cap.HiSparseCap, "cap_problems", lambda self, *args: [])
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and "prefix hit" in found.report(), found and found.report()


# (the profile's first 100 traces run clean on the release, its classes reached: CI's shard in
# `test_every_profile.py`)
