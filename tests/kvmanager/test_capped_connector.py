"""The caller's cap beside a KV connector's lookup (`Connect.max_hit`): vLLM 0.33.0's scheduler
passes the auxiliary-output connector's `max_cache_hit` to `get_computed_blocks_for_connector`
and keeps the external tokens only where the hit and they end on a block at most there
(`cap_external_hit`, scheduler.py 1117-1127 and 1189-1197; the "capped connector" profile,
`strategies/kvmanager/capped_connector.py`). The field; a prompt met again through the
connector hits up to the cap on the released manager and in the oracle alike, its external
tokens kept or dropped as the scheduler does, and the catalogue mutant whose connector lookup
drops the cap is caught there; the profile's traces run clean and reach the cap's classes
(`test_every_profile.py` runs its first 100). The vLLM tests skip without vLLM (and are
slow)."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.kvmanager import connector_cap
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import capped_connector, codec, streams
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Schedule, to_json
from tests.helpers import agreeing_features, divergence, with_engine

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)

PROMPT = list(range(100, 114))  # 14 tokens; the first request caches its first 2 blocks of 4
BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 30, "block_size": 4, "window": 0,
        "max_model_len": 100}


def met_again(max_hit: int) -> dict:
    """9 tokens of the prompt computed whole and finished (8 cached), then the prompt admitted
    through the connector, which holds 4 tokens past the local hit, its lookup capped at
    `max_hit` tokens."""
    return BASE | {"ops": [{"op": "arrive", "rid": 1, "tokens": PROMPT[:9]},
                           {"op": "schedule", "rid": 1, "chunk": 9},
                           {"op": "finish", "rid": 1},
                           {"op": "arrive", "rid": 2, "tokens": PROMPT},
                           {"op": "connect", "rid": 2, "chunk": 14, "external": 4,
                            "max_hit": max_hit}]}


def test_the_field_round_trips_and_the_refusals_left_are_one_line_errors():
    trace = capped_connector.GENERATOR.generate(0, 0)
    assert codec.from_json(to_json(trace)) == trace
    assert any(isinstance(op, Connect) and op.max_hit >= 0 for op in trace.ops)
    assert codec.from_json(met_again(8)).ops[-1].max_hit == 8
    assert "max_hit" not in to_json(codec.from_json(met_again(-1)))["ops"][-1]
    # (beside HiSparse's groups too since 2026-12-07: `test_capped_hisparse.py`)
    for data, shows in [(met_again(-2), "ops[4].max_hit")]:
        with pytest.raises(FormatError) as error:
            codec.from_json(data)
        assert "\n" not in str(error.value) and shows in str(error.value), str(error.value)


def test_the_profile_is_made_alone_only_and_caps_its_admissions():
    assert "capped connector" in streams.ALONE_ONLY and "capped connector" in streams.profiles()
    traces = [capped_connector.GENERATOR.generate(0, index) for index in range(20)]
    assert all(trace.note == "profile capped connector" for trace in traces)
    caps = [op.max_hit for trace in traces for op in trace.ops
            if isinstance(op, (Connect, Schedule))]
    assert 0.6 < sum(cap >= 0 for cap in caps) / len(caps) < 0.8  # SHARE, 0.7
    assert 0 in caps and any(cap > 0 for cap in caps)
    assert any(op.max_hit >= 0 for trace in traces for op in trace.ops if isinstance(op, Connect))


def test_the_scheduler_keeps_external_tokens_only_to_a_block_at_most_at_the_cap():
    class Counted(connector_cap.ConnectorCap):
        def __init__(self):
            self.counted = []

        def count(self, name):
            self.counted.append(name)

    lock = Counted()
    assert [lock.capped_external(cap, 8, 4, 4) for cap in (-1, 13, 12, 11, 8)] == \
        [4, 4, 4, 0, 0]
    assert lock.capped_external(12, 8, 3, 4) == 0 and lock.capped_external(0, 0, 0, 4) == 0
    assert lock.counted.count(connector_cap.DROPPED) == 3
    assert lock.counted.count(connector_cap.KEPT) == 2
    assert connector_cap.lookup_cap(20, 14) == 13 and connector_cap.lookup_cap(-1, 14) == -1
    # beside a Mamba group a hit of 6 (blocks of 4): its tail of 2 dropped for 6 external
    # tokens (4 + 6 = 10: no block end, dropped by the cap: the hit of 4 is admitted with
    # nothing loaded, `align_tail_drop.py`), or kept for 1 (nothing loaded)
    assert lock.capped_at_partial(12, 6, 2, 6, 4) == (True, 0)
    assert lock.counted[-1] == connector_cap.DROPPED
    assert lock.capped_at_partial(12, 6, 2, 8, 4) == (True, 8)  # 4 + 8 = 12: kept
    assert lock.capped_at_partial(12, 6, 2, 1, 4) == (False, 0)  # the tail kept, none loaded
    assert lock.capped_at_partial(-1, 6, 2, 6, 4) == (True, 6)  # no cap: all of them
    assert lock.capped_at_partial(12, 8, 0, 4, 4) == (False, 4)  # no tail: 8 + 4 = 12


@with_vllm
@pytest.mark.parametrize("max_hit, hit, external", [(-1, 8, 4), (13, 8, 4), (12, 8, 4),
                                                    (8, 8, 0), (4, 4, 0), (3, 0, 0), (0, 0, 0)])
def test_a_prompt_met_again_through_the_connector_hits_up_to_the_cap(max_hit, hit, external):
    trace = codec.from_json(met_again(max_hit))
    events = agreeing_features("kvmanager", KVMANAGER.catalogue.resolve("vllm.kvmanager"),
                               [trace])
    assert events["connector admission with a hit"] == (hit > 0)
    assert events[connector_cap.CAPPED] == (max_hit >= 0)
    assert events[connector_cap.KEPT] == (max_hit >= 0 and external > 0)
    assert events[connector_cap.DROPPED] == (max_hit >= 0 and not external)
    assert events["hit cut by the caller's cap"] == (hit < 8)
    found = divergence("kvmanager", trace, "mutant.vllm.kvmanager.connector_cap_ignored")
    assert (found is not None) == (hit < 8), max_hit  # a cap that cuts nothing: the same


@with_vllm
def test_the_released_manager_runs_the_profiles_traces_clean():
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", vllm, (capped_connector.GENERATOR.generate(0, index)
                                                   for index in range(12)))
    assert events[connector_cap.CAPPED] and events["hit cut by the caller's cap"]
    assert events[connector_cap.KEPT] and events[connector_cap.DROPPED]
