"""The caller's cap beside a Mamba "align" group (the "capped mamba" profile,
`strategies/kvmanager/capped_mamba.py`): vLLM 0.33.0 takes the cap at both lookups there,
`get_computed_blocks` (the hybrid fixed point) and a connector's `get_computed_blocks_for_connector`
(`find_longest_cache_hit_per_group`, each group capped on its own, full attention's EAGLE
margin at `min(cap + margin, hashed tokens)`). A prompt met again through the connector hits up
to the cap on the release and in the reduced mode's oracle alike; a judge blind to the cap
reports the release; the catalogue mutant of line 969 (`+` as `<<`, a survivor without a cap)
is caught there and nowhere without one. The vLLM tests skip without vLLM (and are slow)."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.kvmanager import connector_cap
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.oracle.kvmanager import align_hit
from kvfuzz.strategies.kvmanager import capped_mamba, codec, streams
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Schedule, to_json
from tests.helpers import agreeing_features, divergence, with_engine

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)

PROMPT = list(range(100, 117))  # 17 tokens, computed a block a step: states at 4, 8, 12, 16
BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 32, "block_size": 4, "window": 0,
        "max_model_len": 64, "mamba_mode": "align", "mamba_checkpoint": 0, "eagle": True}
SHIFTED = "mutant.vllm.kvmanager.mamba_connector_eagle_margin_shifted"


def met_again(max_hit: int) -> dict:
    """The prompt computed a block a step and finished, then a 20-token prompt starting with it
    admitted through the connector (which holds nothing), its lookups capped at `max_hit`."""
    steps = [{"op": "schedule", "rid": 1, "chunk": chunk} for chunk in (4, 4, 4, 4, 1)]
    return BASE | {"ops": [{"op": "arrive", "rid": 1, "tokens": PROMPT}, *steps,
                           {"op": "finish", "rid": 1},
                           {"op": "arrive", "rid": 2, "tokens": PROMPT + [7, 8, 9]},
                           {"op": "connect", "rid": 2, "chunk": 20, "external": 0,
                            "max_hit": max_hit}]}


def test_a_cap_beside_the_group_is_read():
    # (beside HiSparse's groups too since 2026-12-07: `test_capped_hisparse.py`)
    assert codec.from_json(met_again(8)).ops[-1].max_hit == 8
    trace = capped_mamba.GENERATOR.generate(0, 0)
    assert codec.from_json(to_json(trace)) == trace


def test_the_profile_is_made_alone_only_and_caps_its_admissions():
    assert "capped mamba" in streams.ALONE_ONLY and "capped mamba" in streams.profiles()
    traces = [capped_mamba.GENERATOR.generate(0, index) for index in range(12)]
    assert all(t.note == "profile capped mamba" and t.mamba_mode == "align" for t in traces)
    caps = [op.max_hit for t in traces for op in t.ops if isinstance(op, (Connect, Schedule))]
    assert 0.6 < sum(cap >= 0 for cap in caps) / len(caps) < 0.8  # capped_connector.SHARE
    assert any(isinstance(op, Connect) for t in traces for op in t.ops)


def test_the_oracle_caps_each_groups_lookup():
    units, cached = list(range(5)), {(u, g) for u in range(4) for g in (0, 1)}
    # full attention looked a unit past the cap, its drop taken; the Mamba state no deeper
    assert align_hit.hybrid_hits(units, 20, 4, 4, cached, True) == (12, 12)
    assert align_hit.hybrid_hits(units, 20, 4, 4, cached, True, 8) == (8, 8)
    assert align_hit.hybrid_hits(units, 20, 4, 4, cached, False, 13) == (12, 12)
    assert align_hit.lookup_cap(20, 30) == 19 and align_hit.lookup_cap(1, -1) == 0


@with_vllm
@pytest.mark.parametrize("max_hit, hit", [(-1, 12), (16, 12), (12, 12), (11, 8), (8, 8),
                                          (5, 4), (4, 4), (3, 0), (0, 0)])
def test_a_prompt_met_again_beside_the_group_hits_up_to_the_cap(max_hit, hit):
    trace = codec.from_json(met_again(max_hit))
    events = agreeing_features("kvmanager", KVMANAGER.catalogue.resolve("vllm.kvmanager"),
                               [trace])
    assert events["admission with a hit"] == (hit > 0)
    assert events[connector_cap.CAPPED] == (max_hit >= 0)
    assert bool(events[connector_cap.ALIGN_CUT]) == (hit < 12)
    # line 969's `<<`: cap << margin looks past cap + margin where that lies below what is
    # cached (16 tokens of the 20 hashed): caps 3 to 8 here (0 << 4 is 0, and 0 + 4 finds a
    # block the drop takes again; from 12 on both reach the cached 16)
    found = divergence("kvmanager", trace, SHIFTED)
    assert (found is not None) == (0 < max_hit < 12), max_hit


@with_vllm
def test_a_judge_blind_to_the_cap_reports_the_release(monkeypatch):
    trace = codec.from_json(met_again(8))
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    monkeypatch.setattr(align_hit, "lookup_cap", lambda num_tokens, cap=-1: num_tokens - 1)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and "expected hit 12" in found.report(), found and found.report()


@with_vllm
def test_the_released_manager_runs_the_profiles_traces_clean():
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", vllm, (capped_mamba.GENERATOR.generate(0, index)
                                                   for index in range(8)))
    assert events[connector_cap.ALIGN_CAPPED] and events[connector_cap.ALIGN_CUT]
