"""Which blocks are cached beside a Mamba "align" group (`fuzz/kvmanager/align_caching.py`): the
entries each op adds to the pool's cache map, predicted from the map before it
(`oracle/kvmanager/align_caching.py`, tested here without vLLM), and compared after every op of
the reduced mode. Slow where it imports vLLM."""

import pytest

from kvfuzz.oracle.kvmanager import align_caching as rule
from kvfuzz.strategies.kvmanager import hybrid
from tests.helpers import divergence, with_engine, without_align_caching_check

UNITS = list(range(100, 120))  # a request's hash units: unit i covers (i + 1) * hash_size tokens


def entries(keys=(), hash_size=1):
    return rule.Entries(list(keys) or [None] * 8, lambda key: (key[0] - 99) * hash_size)


def test_full_blocks_keyed_from_the_cached_count_to_the_hashed_tokens():
    made = entries()
    cached = rule.full_attention(made, [0, 3, 4, 5], 1, 7, UNITS[:7], 20, 2, 2, False)
    assert cached == 3  # min(7 tokens, 14 hashed) // 2
    assert made.as_keys(8)[3:6] == [(101, 0), (102, 0), None]  # block 0 below the count


def test_a_promoted_partial_entry_goes_and_the_prompt_tail_is_keyed_apart():
    # block 3 held the partial entry at 3 tokens (unit 2); caching it whole drops that entry;
    # the prompt's tail (prompt 6: boundary 5, inside the table's block 1) is keyed apart
    made = entries([None, None, None, (102, 0), None, None, None, None])
    cached = rule.full_attention(made, [3, 4, 5], 0, 6, UNITS[:6], 6, 4, 1, False)
    assert cached == 1
    assert made.get(3) == [(103, 0)]  # units 0-3: its 4 tokens
    assert made.get(4) == [(104, 0)]  # the tail: unit 4, 5 tokens (the prompt's last but one)


def test_a_prompt_tail_already_keyed_adds_nothing_and_eagle_keys_it_at_the_prompts_end():
    made = entries([None, None, (102, 0), None, None, None, None, None])
    rule.full_attention(made, [2], 0, 3, UNITS[:3], 4, 4, 1, False)
    assert not made.changed
    plain, eagle = entries(), entries()
    rule.full_attention(plain, [2, 3], 0, 6, UNITS[:6], 6, 4, 1, False)
    rule.full_attention(eagle, [2, 3], 0, 6, UNITS[:6], 6, 4, 1, True)
    assert (plain.get(3), eagle.get(3)) == ([(104, 0)], [(105, 0)])


def test_the_mamba_mask_keeps_only_reachable_boundaries_under_retention_zero():
    assert rule.mamba_mask(0, 4, 2, 2, None, (5,)) is None
    assert rule.mamba_mask(0, 4, 2, 2, 0, (5,)) == [False, True, False, False]
    assert rule.mamba_mask(0, 6, 2, 2, 4, ()) == [False, True, False, True, False, True]
    assert rule.replay_boundaries(8, 4, True) == (0, 4)


def test_a_transient_checkpoint_is_evicted_and_a_kept_one_rekeyed():
    made = entries([None, None, (101, 1), None, None, None, None, None])
    # position 3 is not the prompt's boundary, nor a retained block end, nor a junction: evicted
    rule.mamba(made, [0, 2, 6], 0, 0, UNITS[:8], 20, 0, 2, 1, 0, False, (3, 1), 19)
    assert made.get(2) == []
    # the prompt's checkpoint (19 of a 20-token prompt): the block re-keyed there
    made = entries([None, None, (101, 1), None, None, None, None, None])
    rule.mamba(made, [0, 2, 6], 0, 0, UNITS, 20, 0, 2, 1, 0, False, (19, 1), 19)
    assert made.get(2) == [(118, 1)]


def test_a_partial_tail_keyed_is_noted_and_its_copy_takes_its_entries():
    made = entries()
    cached = rule.mamba(made, [0, 2, 6], 0, 5, UNITS[:5], 6, 4, 2, 1, None, False, None, 5)
    assert (cached, made.partial_tail, made.get(6)) == (2, 2, [(104, 1)])
    made.move(6, 7)  # (the next step's copy-on-write)
    assert (made.get(6), made.get(7)) == ([], [(104, 1)])


def test_cacheable_tokens_cut_to_the_block_unless_hashed_finer():
    assert rule.cacheable(7, 4, 4, False) == 4
    assert rule.cacheable(7, 4, 2, False) == 7
    assert rule.cacheable(9, 4, 4, True, 1) == 8  # min(8 finalized, 8 + 4)


@pytest.mark.slow
@with_engine("vllm")
def test_the_mutant_is_caught_only_by_this_check(monkeypatch):
    """The prompt tail keyed as EAGLE's (`mamba_align_prompt_tail_as_eagle`) is caught on its
    "mamba align" trace by this check, and with it off survives that trace: no other reduced
    check sees a wrong entry that every hit, count and event stays consistent with."""
    name = "mutant.vllm.kvmanager.mamba_align_prompt_tail_as_eagle"
    trace = hybrid.MAMBA_ALIGN.generate(0, INDEX)
    found = divergence("kvmanager", trace, name)
    assert found is not None and found.what.startswith("which blocks cached"), found
    without_align_caching_check(monkeypatch)
    assert divergence("kvmanager", trace, name) is None


INDEX = 2  # the first "mamba align" trace of seed 0 that catches the mutant
