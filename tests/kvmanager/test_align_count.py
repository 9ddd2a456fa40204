"""The exact counts of `allocate_slots` beside a Mamba "align" group
(`oracle/kvmanager/align_count.py`, judged by `fuzz/kvmanager/align_count.py`): worked examples
of each part of vLLM 0.33.0's count on plain data (no vLLM needed); then (`slow`, with vLLM) the
released class agreeing on seeded traces with every allocation judged, and mutants that only
the count catches."""

import pytest

from kvfuzz.oracle.kvmanager.align_count import Engine, Step, counts, fits, freed
from tests.helpers import divergence, needs_engine



def with_vllm(test):
    """The slow tier's marks, skipped without vLLM (`needs_engine`)."""
    for mark in needs_engine("vllm"):
        test = mark(test)
    return test


REF = [0] * 16  # every block free but those a test holds


def held(*blocks):
    ref = list(REF)
    for block in blocks:
        ref[block] += 1
    return ref


B4 = Engine(block_size=4, hash_size=2, max_model_len=1024)


def test_an_admission_without_a_hit_counts_its_blocks_and_one_mamba_state():
    # full attention cdiv(10, 4) = 3 blocks; the Mamba group 3 capped at the one state it writes
    assert counts(B4, Step(computed=0, new=10, tokens=10, prompt=10), 8, REF) == (None, 4, 8)


def test_speculative_blocks_raise_the_cap_until_the_request_is_allocated():
    engine = Engine(4, 2, 1024, speculative=2)
    admission = Step(computed=0, new=10, tokens=10, prompt=10)
    assert counts(engine, admission, 9, REF)[1] == 3 + 3  # the state and its 2 scratch blocks
    # a running request's step past its table: one state, no new scratch blocks
    step = Step(computed=10, new=4, tokens=14, prompt=10, full_table=3,
                mamba_table=(0, 0, 5, 6, 7), allocated=True)
    assert counts(engine, step, 9, held(5, 6, 7))[1] == 1 + 1


def test_a_hit_inside_a_block_counts_a_copy_in_each_group_and_its_free_state():
    # a hit of 6 tokens: full attention's blocks 5 and 6 held elsewhere, the Mamba state block 7
    # free (cached, no reference): full 3 - 2 + copy 1; Mamba 3 - 2 = 1, + copy = 2 (its cap
    # with the copy), + the free state 1
    step = Step(computed=0, new=4, tokens=10, prompt=10, hit=6, full_hit=(5, 6),
                mamba_hit=(0, 7))
    assert counts(B4, step, 8, held(5, 6)) == (None, 2 + 3, 8)
    # the same hit on a block boundary: no copies
    whole = Step(computed=0, new=4, tokens=12, prompt=12, hit=8, full_hit=(5, 6),
                 mamba_hit=(0, 7))
    assert counts(B4, whole, 8, held(5, 6, 7))[1] == 1 + 1


def test_a_copy_pending_from_the_last_step_counts_one_block_inside_the_table():
    step = Step(computed=6, new=1, tokens=7, prompt=6, full_table=2, mamba_table=(0, 9),
                allocated=True)
    assert counts(B4, step, 3, held(1, 2, 9))[1] == 0
    assert counts(B4, Step(**{**vars(step), "pending_copy": True}), 3, held(1, 2, 9))[1] == 1


def test_a_checkpoint_raises_the_cap_by_its_block():
    # a chunk from 0 to 12 tokens exporting the state at 10 (aligned to the hash block)
    engine = Engine(4, 2, 1024, checkpoint=2)
    step = Step(computed=0, new=12, tokens=12, prompt=12)
    assert counts(engine, step, 9, REF)[1] == 3 + 2
    assert counts(B4, step, 9, REF)[1] == 3 + 1


def test_the_states_a_step_moves_past_are_free_before_its_count():
    # computed 9 in blocks of 4: the state read at 1 and a checkpoint at 0 leave (the one at 0
    # is also another table's), the state written at 2 stays
    step = Step(computed=9, new=1, tokens=10, prompt=9, full_table=3, mamba_table=(3, 4, 8),
                allocated=True)
    assert freed(B4, step, held(3, 3, 4, 8)) == ((0, 0, 8), 1)
    assert counts(B4, step, 2, held(3, 3, 4, 8))[2] == 3


def test_a_mamba_count_below_zero_is_summed_as_the_release_sums_it():
    # a table longer than the step needs (blocks over-allocated): -1 offsets full attention's 1
    step = Step(computed=4, new=1, tokens=5, prompt=4, full_table=1, mamba_table=(0, 6, 7),
                allocated=True)
    assert counts(B4, step, 0, held(5, 6, 7))[1] == 0
    assert fits(B4, step, 0, held(5, 6, 7))[0]


def test_the_whole_sequence_and_the_watermark_refuse_an_admission_whose_step_fits():
    step = Step(computed=0, new=4, tokens=40, prompt=40, whole=True)
    made, why = fits(B4, step, 5, REF)
    assert not made and "whole sequence's count 11" in why
    assert fits(B4, Step(**{**vars(step), "whole": False}), 5, REF)[0]
    engine = Engine(4, 2, 1024, watermark=4)  # count 2 + 4 > 5
    assert not fits(engine, Step(**{**vars(step), "whole": False, "watermark": True}), 5,
                    REF)[0]
    assert fits(engine, Step(**{**vars(step), "whole": False}), 5, REF)[0]


def test_lookahead_takes_full_attention_slots_only_and_a_load_asks_none():
    engine = Engine(4, 2, 1024, lookahead=3)
    step = Step(computed=0, new=4, tokens=4, prompt=4)
    assert counts(engine, step, 9, REF)[1] == 2 + 1
    assert counts(engine, Step(**{**vars(step), "lookahead": False}), 9, REF)[1] == 1 + 1


# -- the released class (slow: it imports vLLM) --------------------------------------------------

@with_vllm
def test_the_release_agrees_with_every_allocation_judged(monkeypatch):
    from kvfuzz.fuzz.kvmanager.align import AlignLockstep
    from kvfuzz.strategies.kvmanager import hybrid

    judged = []
    original = AlignLockstep._count_problems

    def counted(self, *args, **kwargs):
        problems = original(self, *args, **kwargs)
        judged.append(problems)
        return problems
    monkeypatch.setattr(AlignLockstep, "_count_problems", counted)
    for index in range(4):
        assert divergence("kvmanager", hybrid.MAMBA_ALIGN.generate(0, index),
                          "vllm.kvmanager") is None
    assert len(judged) > 200 and not any(judged)


# (mutant, the first "mamba align" trace of seed 0 that catches it): a refusal where the counts
# fit exactly (the Mamba cap a block high; `>=` for `>`), an admission whose whole sequence does
# not fit made
ONLY_THE_COUNT = [("mamba_align_cap_one_more", 9), ("exact_fit_refused", 1),
                  ("whole_request_unchecked", 0)]


@with_vllm
@pytest.mark.parametrize("name, index", ONLY_THE_COUNT, ids=[n for n, _ in ONLY_THE_COUNT])
def test_only_the_count_catches(name, index, monkeypatch):
    from kvfuzz.fuzz.kvmanager.align import AlignLockstep
    from kvfuzz.strategies.kvmanager import hybrid

    trace, broken = hybrid.MAMBA_ALIGN.generate(0, index), f"mutant.vllm.kvmanager.{name}"
    found = divergence("kvmanager", trace, broken)
    assert found is not None and found.what.startswith("None vs success"), found
    monkeypatch.setattr(AlignLockstep, "_count_problems", lambda self, *args, **kwargs: [])
    assert divergence("kvmanager", trace, broken) is None
