"""The caller's cap beside a Mamba "align" group (the "capped mamba" profile,
`strategies/kvmanager/capped_mamba.py`): vLLM 0.33.0 takes the cap at both lookups there,
`get_computed_blocks` (the hybrid fixed point) and a connector's `get_computed_blocks_for_connector`
(`find_longest_cache_hit_per_group`, each group capped on its own, full attention's EAGLE
margin at `min(cap + margin, hashed tokens)`). A prompt met again through the connector hits up
to the cap on the release and in the reduced mode's oracle alike; a judge blind to the cap
reports the release; the catalogue mutant of line 969 (`+` as `<<`, a survivor without a cap)
is caught there and nowhere without one. Since 2026-12-07 (later) a partial tail dropped for a
load the cap then drops is judged as the scheduler admits it (the block-aligned hit, nothing
loaded: `align_tail_drop.py`), where the judge kept the whole hit before: a mutant only that
admission reaches is caught, and vLLM 0.33.0's finding there (the step reads no state) pinned.
The vLLM tests skip without vLLM (and are slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfuzz.fuzz.kvmanager import align_reads, align_tail_drop, connector_cap
from kvfuzz.fuzz.kvmanager.align_external import AlignExternal
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.oracle.kvmanager import align_hit
from kvfuzz.strategies.kvmanager import capped_mamba, codec, streams
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Schedule, to_json
from tests.helpers import agreeing_features, divergence, loads, with_engine

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)

PROMPT = list(range(100, 117))  # 17 tokens, computed a block a step: states at 4, 8, 12, 16
BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 32, "block_size": 4, "window": 0,
        "max_model_len": 64, "mamba_mode": "align", "mamba_checkpoint": 0, "eagle": True}
SHIFTED = "mutant.vllm.kvmanager.mamba_connector_eagle_margin_shifted"
# `mamba_truncate_shifts_partial_state` shrunk from "capped mamba" index 149 (32 ops; blocks
# of 2 hashed per 1): r6's 4-token prompt hits 3 tokens, its tail of 1 dropped for the
# connector's 2, which the cap (4, so 3) drops: 2 + 2 tokens end past it; the hit of 2 admitted
TRUNCATED = Path(__file__).parents[2] / "corpus" / "kvmanager-9df9f1daca430c25.json"
SHIFTS = "mutant.vllm.kvmanager.mamba_truncate_shifts_partial_state"


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


@with_vllm
def test_a_tail_dropped_for_a_load_the_cap_drops_admits_the_block_aligned_hit(monkeypatch):
    """The scheduler's sequence (`align_tail_drop.py`): the tail truncated, nothing loaded, the
    hit of 2 admitted; the release agrees, and the mutant whose cut view moves the partial
    state into its last block (which no load reads) is caught there. The judge before
    2026-12-07, admitting the whole local hit there, agrees with the mutant."""
    trace = loads(TRUNCATED.read_text())
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", vllm, [trace])
    assert events[align_tail_drop.TRUNCATED] == 1 and events[align_reads.STATELESS] == 1
    found = divergence("kvmanager", trace, SHIFTS)
    assert found is not None and "truncate_computed_blocks(r6's hit, 2)" in found.report()
    assert "allocate_slots(r6, 2, hit 2)" in found.report(), found.report()

    def whole_hit(self, op, request, hit, boundary):  # the judge before: a plain admission
        self.looked_up = True
        return (yield from self.schedule(Schedule(op.rid, op.chunk, op.pad,
                                                  rows_in_flight=op.rows_in_flight,
                                                  max_hit=op.max_hit)))
    monkeypatch.setattr(AlignExternal, "truncated_admission", whole_hit)
    assert divergence("kvmanager", trace, SHIFTS) is None


@pytest.mark.slow
@with_vllm
def test_the_release_reads_no_state_after_a_truncated_hit(monkeypatch):
    """vLLM 0.33.0's finding (2026-12-07): the truncated view's Mamba blocks are nulls, so the
    admitted request's first step reads its state from a null column (the worker's
    `preprocess_mamba` copies from (c - 1) // b). The reduced mode holds the release to it;
    without that, the read is reported."""
    trace = loads(TRUNCATED.read_text())
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    monkeypatch.setattr(align_tail_drop.AlignTailDrop, "hold_to_finding", lambda self, rid: None)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None, "the release read a state after its truncated hit"
    assert "r6's step from 2 to 4 tokens: the worker's step reads its state from column 0, " \
           "which holds no block" in found.report(), found.report()
