"""Multi-token prediction beside a Mamba group in mode "none" or "all", prefix caching off (the
"mamba" profile's share since 2026-12-08, `strategies/kvmanager/mamba_speculative.py`): the
codec takes speculative Mamba blocks there, the full oracle counts and takes `block_size *
num_speculative_blocks` tokens more for the Mamba group (vLLM 0.33.0's `MambaManager` outside
"align"), and the profile's other traces keep their bytes. No vLLM needed; the released class
runs the profile clean (`test_every_profile.py`) and the catalogue mutant
`mamba_speculative_one_short` is caught on it (`test_mutants.py`, the "mamba" trace 5)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvfuzz.oracle.kvmanager.model import MAMBA_SPECULATIVE, KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import hybrid
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.trace import Schedule
from kvfuzz.strategies.sources import TraceGenerator

# the mutant's shrunk case: a 1-token prompt's admission, 3 draft tokens, blocks of 2
CASE = Path(__file__).parents[2] / "corpus" / "kvmanager-0259d22976a4efbf.json"


def test_the_codec_takes_speculative_blocks_beside_a_plain_mamba_group_only():
    data = json.loads(CASE.read_text())
    trace = from_json(data, "t")
    assert (trace.mamba_mode, trace.mamba_speculative, trace.lookahead) == ("all", 3, 3)
    assert from_json(dict(data, mamba_mode="none"), "t").mamba_speculative == 3
    with pytest.raises(FormatError, match="mamba_speculative"):
        from_json({key: value for key, value in data.items() if key != "mamba_mode"}, "t")


def _admit(model: KVManagerModel, tokens: int = 1, whole: bool = False):
    return model.allocate_slots(1, [], tokens, 0, tokens, 0, [[], []], whole=whole)


@pytest.mark.parametrize("mode", ("none", "all"))
def test_the_oracle_gives_the_mamba_group_its_speculative_blocks(mode):
    """The shrunk case's admission (as vLLM 0.33.0 answers it): 1 token and 3 lookahead slots,
    full attention cdiv(4, 2) = 2 blocks, the Mamba group cdiv(4 + 2 * 3, 2) = 5."""
    model = KVManagerModel(8, 2, 0, 1024, caching=False, lookahead=3, mamba_mode=mode,
                           mamba_speculative=3)
    assert [len(blocks) for blocks in _admit(model)] == [2, 5] and model.predicted == 7
    # without the speculative blocks, 2 + 2
    plain = KVManagerModel(8, 2, 0, 1024, caching=False, lookahead=3, mamba_mode=mode)
    assert [len(blocks) for blocks in _admit(plain)] == [2, 2]


def test_a_refusal_the_speculative_blocks_decide_is_marked_and_changes_nothing():
    model = KVManagerModel(7, 2, 0, 1024, caching=False, lookahead=3, mamba_mode="none",
                           mamba_speculative=3)  # 6 free: 7 needed, 4 without them
    assert _admit(model) is None and model.take_marks() == [MAMBA_SPECULATIVE[0]]
    assert model.pool.num_free() == 6 and not model.tables[1]
    # the whole-request check too (the prompt's 5 tokens: 3 + cdiv(5 + 6, 2) = 9)
    model = KVManagerModel(9, 2, 0, 1024, caching=False, mamba_mode="none", mamba_speculative=3)
    assert _admit(model, 5, whole=True) is None and model.refused_whole
    assert model.take_marks() == [MAMBA_SPECULATIVE[0]]


def test_the_speculative_blocks_reach_past_max_model_len():
    """The slots are cut at max_model_len (4 tokens: 2 blocks); the Mamba group's speculative
    blocks are counted past it (as `get_num_blocks_to_allocate` adds them after the cut)."""
    model = KVManagerModel(12, 2, 0, 4, caching=False, lookahead=3, mamba_mode="none",
                           mamba_speculative=2)
    assert [len(blocks) for blocks in _admit(model, 3)] == [2, 4]
    assert model.take_marks() == [MAMBA_SPECULATIVE[1]]


def test_an_align_group_is_left_to_its_reduced_checks():
    model = KVManagerModel(8, 2, 0, 1024, mamba_mode="align", mamba_speculative=3)
    assert model.speculative == 0


def test_the_profiles_share_leaves_its_other_traces_as_they_were():
    """The "mamba" profile's first 100 traces of seed 0: those outside the share are
    `build_mamba`'s as before it; those in it differ only by k speculative blocks, k lookahead
    slots and (some) every schedule padded with k placeholder drafts."""
    before = TraceGenerator(hybrid.MAMBA.name, hybrid.build_mamba, num_ops=200,
                            max_fuzz_ops=200)
    share = padded = 0
    for index in range(100):
        old, new = before.generate(0, index), hybrid.MAMBA.generate(0, index)
        # (the Mamba group's own block size is drawn after this share: `test_mamba_block.py`)
        new = replace(new, window_block_size=0)
        if not new.mamba_speculative:
            assert new == old, index
            continue
        k, share = new.mamba_speculative, share + 1
        assert new.lookahead == k and 1 <= k <= 3, index
        pads = {op.pad for op in new.ops if isinstance(op, Schedule)}
        assert pads in ({0}, {k}), (index, pads)
        padded += pads == {k}
        unpadded = tuple(replace(op, pad=0) if isinstance(op, Schedule) else op
                         for op in new.ops)
        assert replace(new, mamba_speculative=0, lookahead=old.lookahead, ops=unpadded) == old
    assert 20 <= share <= 50 and padded, (share, padded)
