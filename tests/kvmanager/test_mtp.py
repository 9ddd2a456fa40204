"""Multi-token prediction (`kvmanager/5[mtp]`, `strategies/kvmanager/mtp.py`): the trace field and
its one-line refusals (vLLM's own: a scheduler block below the prefill lookahead with EAGLE);
the oracle's rule (the last prefill_lookahead - 1 computed tokens held back from caching: every
group of the unitary coordinator, the dropping groups of the hybrid one) on the model; with
vLLM (slow), the released manager runs the profile clean to its edge classes (and with a hash
block below the block size), and an oracle that holds nothing back is told apart from it. The
mutants (`mtp_reprefillable_cached`, `mtp_peek_past_finalized`) are caught in
`test_mutants.py`."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.oracle.kvmanager.model import MTP_HELD, KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager import mtp as profile
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import agreeing_features, with_engine

BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 8, "block_size": 4, "window": 0,
        "max_model_len": 64, "ops": [], "eagle": True, "prefill_lookahead": 3}


with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)


def test_the_field_round_trips_and_bad_values_are_one_line_errors():
    trace = profile.GENERATOR.generate(0, 0)
    assert codec.from_json(to_json(trace)) == trace and trace.prefill_lookahead > 1
    assert codec.from_json(BASE).prefill_lookahead == 3
    # a scheduler block below the lookahead: refused with EAGLE (vLLM's ValueError), not with
    # lookahead hashes (the scheduler cleared use_eagle)
    assert codec.from_json(BASE | {"block_size": 2, "eagle": False, "hash_lookahead": 3})
    # beside a window of the same block size, hashed per 2 tokens (vLLM takes it)
    assert codec.from_json(BASE | {"window": 4, "hash_block_size": 2}).hash_block_size == 2
    for change in ({"prefill_lookahead": -1}, {"prefill_lookahead": 17}, {"block_size": 2},
                   {"window": 4, "window_block_size": 8},
                   {"dcp": 2, "eagle": False},
                   # beside a Mamba group in mode "align" taken since 2026-12-06
                   # (test_mamba_lookahead.py); in mode "all" (caching off) not
                   {"mamba_mode": "all", "eagle": False, "caching": False}):
        with pytest.raises(FormatError) as error:
            codec.from_json(BASE | change)
        assert "\n" not in str(error.value) and "prefill_lookahead" in str(error.value)


def test_the_reprefillable_tokens_are_held_back():
    unitary = KVManagerModel(8, 4, 0, 64, prefill_lookahead=3)
    assert unitary.cacheable(9, 0) == 7 and MTP_HELD in unitary.take_marks()  # block 1 waits
    assert unitary.cacheable(10, 0) == 8 and not unitary.take_marks()
    # the hybrid coordinator: the dropping group's peek within the finalized tokens; a group
    # without the drop holds nothing back (the released rule)
    hybrid = KVManagerModel(8, 4, 4, 64, eagle=True, eagle_groups=(1,), prefill_lookahead=3)
    assert (hybrid.cacheable(9, 0), hybrid.cacheable(9, 1)) == (8, 7)  # one block, not two
    assert MTP_HELD in hybrid.take_marks()
    plain = KVManagerModel(8, 4, 4, 64, prefill_lookahead=3)  # lookahead hashes: none drops
    assert (plain.cacheable(9, 0), plain.cacheable(9, 1)) == (8, 8)


@with_vllm
def test_the_released_manager_runs_the_profile_clean_to_its_edge_classes():
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", vllm, (profile.GENERATOR.generate(0, index)
                                                   for index in range(16)))
    wanted = [MTP_HELD, "config: multi-token prediction (prefill lookahead)",
              "config: lookahead hashing", "config: EAGLE", "config: sliding window"]
    assert all(events[name] for name in wanted), {name: events[name] for name in wanted}


@with_vllm
def test_an_oracle_holding_nothing_back_is_told_apart():
    """The hold-back is load-bearing: without it the oracle diverges from the released manager
    on 14 of the first 30 traces (2026-12-04); index 1 is one."""
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = profile.GENERATOR.generate(0, 1)
    original = KVManagerModel.__init__

    def holds_nothing(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.reprefillable = 0
    try:
        KVManagerModel.__init__ = holds_nothing
        assert KVMANAGER.check(trace, vllm).status != AGREE
    finally:
        KVManagerModel.__init__ = original
    assert KVMANAGER.check(trace, vllm).status == AGREE


@with_vllm
def test_a_hash_block_below_the_block_size_runs_clean_and_its_peek_mutant_is_caught():
    """MTP beside a window per a hash block below the block size (the profile's 40% of its
    windowed EAGLE traces): the released manager agrees on the first six, and the dropping
    group's peek over re-prefillable tokens (`mtp_peek_past_finalized`) is caught on one."""
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    mutant = KVMANAGER.catalogue.resolve("mutant.vllm.kvmanager.mtp_peek_past_finalized")
    finer = [trace for trace in (profile.GENERATOR.generate(0, index) for index in range(101))
             if trace.hash_block_size][:6]  # indices 9 to 100
    assert len(finer) == 6 and all(t.hash_block_size < t.block_size for t in finer)
    assert all(KVMANAGER.check(trace, vllm).status == AGREE for trace in finer)
    assert any(KVMANAGER.check(trace, mutant).status != AGREE for trace in finer)

