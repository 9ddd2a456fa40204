"""The caller's cap on a lookup (`Schedule.max_hit`): the `max_cache_hit_length` vLLM 0.33.0's
scheduler passes to `get_computed_blocks` with auxiliary outputs on (scheduler.py 1117-1127,
the "capped hits" profile, `strategies/kvmanager/capped_hits.py`). The field and its one-line
refusals; a prompt met again hits up to the cap on the released manager and in the oracle
alike, and the catalogue mutant that ignores the cap is caught there; the profile's traces run
clean and reach the cap's classes (`test_every_profile.py` runs its first 100). The vLLM tests
skip without vLLM (and are slow)."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import capped_hits, codec, streams
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import agreeing_features, divergence, with_engine

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)

PROMPT = list(range(100, 114))  # 14 tokens: 3 whole blocks of 4 cached by the first request
BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 30, "block_size": 4, "window": 0,
        "max_model_len": 100}


def met_again(max_hit: int) -> dict:
    """The prompt computed whole and finished, then met again by an admission capped at
    `max_hit` tokens."""
    return BASE | {"ops": [{"op": "arrive", "rid": 1, "tokens": PROMPT},
                           {"op": "schedule", "rid": 1, "chunk": 14},
                           {"op": "finish", "rid": 1},
                           {"op": "arrive", "rid": 2, "tokens": PROMPT},
                           {"op": "schedule", "rid": 2, "chunk": 14, "max_hit": max_hit}]}


def test_the_field_round_trips_and_bad_values_are_one_line_errors():
    trace = capped_hits.GENERATOR.generate(0, 0)
    assert codec.from_json(to_json(trace)) == trace
    assert any(getattr(op, "max_hit", -1) >= 0 for op in trace.ops)
    assert codec.from_json(met_again(8)).ops[-1].max_hit == 8
    assert "max_hit" not in to_json(codec.from_json(met_again(-1)))["ops"][-1]
    bad = [(met_again(-2), "ops[4].max_hit")]
    # (beside a KV connector's ops, a Mamba "align" group and HiSparse's groups since
    # 2026-12-07: `test_capped_connector.py`, `test_capped_mamba.py`, `test_capped_hisparse.py`)
    assert codec.from_json(BASE | {"ops": met_again(8)["ops"] + [
        {"op": "connect", "rid": 2, "external": 0, "chunk": 1}]}).ops[4].max_hit == 8
    for data, shows in bad:
        with pytest.raises(FormatError) as error:
            codec.from_json(data)
        assert "\n" not in str(error.value) and shows in str(error.value), str(error.value)


def test_the_profile_is_made_alone_only_and_caps_its_schedules():
    assert "capped hits" in streams.ALONE_ONLY and "capped hits" in streams.profiles()
    traces = [capped_hits.GENERATOR.generate(0, index) for index in range(20)]
    assert all(trace.note == "profile capped hits" for trace in traces)
    caps = [op.max_hit for trace in traces for op in trace.ops if hasattr(op, "max_hit")]
    assert 0.6 < sum(cap >= 0 for cap in caps) / len(caps) < 0.8  # SHARE, 0.7
    assert 0 in caps and any(cap > 0 for cap in caps)


@with_vllm
@pytest.mark.parametrize("max_hit, hit", [(-1, 12), (13, 12), (8, 8), (4, 4), (3, 0), (0, 0)])
def test_a_prompt_met_again_hits_up_to_the_cap_and_the_mutant_ignoring_it_is_caught(max_hit,
                                                                                    hit):
    trace = codec.from_json(met_again(max_hit))
    events = agreeing_features("kvmanager", KVMANAGER.catalogue.resolve("vllm.kvmanager"),
                               [trace])
    # (the first request's admission hits nothing)
    assert (events["admission with a hit"], events["admission, no hit"]) == \
        ((1, 1) if hit else (0, 2))
    assert events["lookup capped by the caller"] == (max_hit >= 0)
    assert events["hit cut by the caller's cap"] == (hit < 12)
    found = divergence("kvmanager", trace, "mutant.vllm.kvmanager.caller_cap_ignored")
    assert (found is not None) == (hit < 12), max_hit  # a cap that cuts nothing: the same


@with_vllm
def test_the_released_manager_runs_the_profiles_traces_clean():
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", vllm, (capped_hits.GENERATOR.generate(0, index)
                                                   for index in range(12)))
    assert events["lookup capped by the caller"] and events["hit cut by the caller's cap"]
