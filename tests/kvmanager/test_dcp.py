"""Decode context parallelism (`kvmanager/5[dcp]`, `strategies/kvmanager/dcp.py`): the trace
field and its one-line refusals; the released manager runs the profile's traces clean; the
`kvfuzz mutate` survivor it was made for (`dcp_world_size > 1` as `< 1`) is killed; and the
oracle's rule for `get_block_ids_for_computed_tokens` under DCP (vLLM 0.33 clips by the spec's
block, a rank's share) tells a manager that clips by its own block apart. The vLLM tests skip
without vLLM (and are slow)."""

from __future__ import annotations

import functools

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec, dcp, streams
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import agreeing_features, divergence, double, with_engine
from tests.kvmanager.test_single_type_mutants import placed

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)


BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 8, "block_size": 4, "window": 0,
        "max_model_len": 64, "ops": [], "dcp": 2}


def test_the_field_round_trips_and_bad_values_are_one_line_errors():
    trace = dcp.GENERATOR.generate(0, 1)
    assert codec.from_json(to_json(trace)) == trace and trace.dcp > 1
    assert codec.from_json(BASE).dcp == 2 and codec.from_json(BASE | {"dcp": 0}).dcp == 0
    for change in ({"dcp": 1}, {"dcp": 3}, {"dcp": 9}, {"window": 3},
                   {"local_chunk": 4}, {"mamba_mode": "align"}):
        with pytest.raises(FormatError) as error:
            codec.from_json(BASE | change)
        assert "\n" not in str(error.value) and "dcp" in str(error.value)


@with_vllm
def test_the_released_manager_runs_dcp_traces_clean():
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = set(+agreeing_features("kvmanager", vllm, (dcp.GENERATOR.generate(0, index)
                                                        for index in range(12))))
    assert {"admission with a hit", "config: decode context parallel",
            "config: lookahead tokens"} <= events


@with_vllm
def test_the_dcp_scale_mutant_is_killed_on_the_seeded_mix():
    """`FullAttentionManager.find_longest_cache_hit` with `dcp_world_size < 1` for `> 1`: the
    lookup at the spec's block, not the manager's (survived `kvfuzz mutate` before the
    profile); seed 0's index 159 is a DCP trace."""
    trace = streams.GENERATOR.generate(0, 159)
    assert trace.note == "profile dcp"
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    with placed("vllm.v1.core.single_type_kv_cache_manager:762:26:"
                "ReplaceComparisonOperator_Gt_Lt:4"):
        assert KVMANAGER.check(trace, vllm).status != AGREE


@functools.cache
def doubles() -> dict:
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class ClipsByManagerBlock(KVCacheManager):
        """`get_block_ids_for_computed_tokens` clipped by the manager's block (the DCP-scaled
        one) rather than the spec's: what its docstring says, not what 0.33 does."""
        def get_block_ids_for_computed_tokens(self, request_id, num_computed_tokens):
            size = self.coordinator.single_type_managers[0].block_size
            return tuple(ids[:-(-num_computed_tokens // size)]
                         for ids in self.get_block_ids(request_id))
    return {"ClipsByManagerBlock": ClipsByManagerBlock}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_dcp:ClipsByManagerBlock
    if name == "ClipsByManagerBlock":
        return doubles()[name]
    raise AttributeError(name)


@with_vllm
def test_the_computed_ids_rule_tells_the_two_clippings_apart():
    """Index 10 of the profile (blocks of 8 over 2 ranks, 3 lookahead slots) holds a block past
    its computed tokens: 0.33 keeps it, a manager clipping by its own block does not."""
    trace = dcp.GENERATOR.generate(0, 10)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, double("kvmanager", f"{__name__}:ClipsByManagerBlock"))
    assert found is not None and "block_ids_for_computed_tokens" in found.report()
