"""The rule of which states a Mamba "align" table keeps (`oracle/kvmanager/mamba_align.py`), on
hand-made tables: each way a table can break it is named (quick: no vLLM; the released class
and the mutants on seeded traces are in `test_align.py`)."""

import pytest

from kvfuzz.oracle.kvmanager.mamba_align import (checkpoint_index, hit_key, kept_positions,
                                                  table_problems)
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager.codec import from_json


def test_a_step_keeps_the_state_it_read_and_the_state_it_wrote():
    assert kept_positions(0, 6, 4) == {1}          # a first step: nothing read
    assert kept_positions(5, 13, 4) == {1, 3}      # read token 4's state, wrote token 12's
    assert kept_positions(13, 14, 4) == {3}        # a decode inside one block: the same block
    assert table_problems([0, 7, 0, 9], 5, 13, 4) is None
    assert table_problems([0, 0, 0, 9], 5, 13, 4) is None  # a hit state already dropped


@pytest.mark.parametrize("table, shows", [
    ([0, 7, 0, 9, 11], "5 blocks after 13 computed tokens in blocks of 4: expected 4"),
    ([0, 7, 0, 0], "its last block (the state of token 12) is the null block"),
    ([3, 7, 0, 9], "holds states at positions [0]"),     # a state moved past, still held
    ([0, 7, 8, 9], "holds states at positions [2]"),     # a state between, never needed
])
def test_each_way_a_table_breaks_the_rule_is_named(table, shows):
    assert shows in table_problems(table, 5, 13, 4)


def test_a_hit_resumes_from_its_last_hash_units_state_in_the_mamba_group():
    assert hit_key([10, 11, 12, 13], 6, 2) == (12, 1)
    assert hit_key([10, 11, 12, 13], 8, 4) == (11, 1)


def test_a_chunk_past_a_valid_prefill_checkpoint_takes_its_block():
    # (start, end, prefill end, block size, hash block, alignment) -> table position or None
    assert checkpoint_index(0, 5, 0, 4, 4, 4) == 0       # checkpoint at 4 in block 0's column
    assert checkpoint_index(0, 13, 0, 4, 2, 1) == 2      # at 12, the last hash boundary
    assert checkpoint_index(0, 5, 0, 4, 4, 0) is None    # no checkpoint blocks
    assert checkpoint_index(0, 7, 8, 4, 4, 4) is None    # retention 0: not the prefill's end
    assert checkpoint_index(0, 4, 0, 4, 4, 4) is None    # 3 is no hash boundary past 0
    assert checkpoint_index(5, 9, 0, 4, 1, 1) is None    # column 1 is the state read's
    assert checkpoint_index(4, 9, 0, 4, 4, 4) == 1       # (column 0 read: 1 is free)
    assert checkpoint_index(4, 13, 0, 4, 4, 3) is None   # 12 - 4 is no multiple of 3
    assert checkpoint_index(4, 13, 0, 4, 4, 4) == 2
    assert checkpoint_index(3, 13, 0, 4, 2, 1) is None   # a chunk starting off the hash grid
    assert kept_positions(5, 13, 4, checkpoint=2) == {1, 2, 3}


def test_a_checkpoint_block_is_required_where_the_rule_takes_one_and_allowed_nowhere_else():
    assert table_problems([0, 7, 8, 9], 5, 13, 4, checkpoint=2) is None
    assert "holds no checkpoint block at position 2" in table_problems([0, 7, 0, 9], 5, 13, 4,
                                                                       checkpoint=2)
    assert "holds states at positions [2]" in table_problems([0, 7, 8, 9], 5, 13, 4)


def test_a_checkpoint_without_mamba_align_is_refused_in_one_line():
    trace = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 4, "block_size": 4, "window": 0,
             "max_model_len": 33, "mamba_checkpoint": 4, "ops": []}
    with pytest.raises(FormatError, match="mamba_checkpoint.*Mamba group in mode"):
        from_json(trace, "t.json")
    assert from_json(trace | {"mamba_mode": "align"}, "t.json").mamba_checkpoint == 4


def test_speculative_blocks_follow_the_written_state_and_are_never_null():
    assert kept_positions(5, 13, 4, speculative=2) == {1, 3, 4, 5}
    assert table_problems([0, 7, 0, 9, 10, 11], 5, 13, 4, speculative=2) is None
    assert "4 blocks after 13 computed tokens in blocks of 4 and 2 speculative: expected 6" in \
        table_problems([0, 7, 0, 9], 5, 13, 4, speculative=2)
    assert "one of its 2 speculative blocks is the null block" in \
        table_problems([0, 7, 0, 9, 10, 0], 5, 13, 4, speculative=2)
    assert "state of token 12 is the null block" in \
        table_problems([0, 7, 0, 0, 10, 11], 5, 13, 4, speculative=2)
    # a checkpoint on what was a speculative block (the release's third clause): kept too
    assert table_problems([0, 7, 8, 9, 10], 5, 13, 4, checkpoint=2, speculative=1) is None


def test_sparse_retention_keeps_the_state_a_resend_resumes_from():
    from kvfuzz.fuzz.kvmanager.align_retention import (replay_state_end, replay_state_problem,
                                                       scheduler_cut)

    # the replay boundary P - 1, aligned to the hash block, then to the Mamba block
    assert replay_state_end(22, 4, 1) == 20 and replay_state_end(13, 4, 4) == 12
    assert replay_state_end(4, 4, 2) == 0          # below one block: nothing kept
    entries = {6: [(120, 1)], 7: [(120, 0)]}.get   # block -> its (hash, group) entries
    hashes = list(range(101, 123))                 # one a token: 20 tokens, hash 120
    assert replay_state_problem(22, 20, [0, 0, 0, 0, 6], entries, hashes, 4, 1) is None
    # the block cached in full attention's group only, or not cached at all: named
    assert "did not cache it under the request's hash of 20 tokens" in replay_state_problem(
        22, 20, [0, 0, 0, 0, 7], entries, hashes, 4, 1)
    assert replay_state_problem(22, 20, [0, 0, 0, 0, 9], lambda b: [None], hashes, 4, 1)
    assert replay_state_problem(22, 21, [0, 0, 0, 0, 9], lambda b: [None], hashes, 4, 1) \
        is None                                    # a step that ends elsewhere: not judged
    # the scheduler's cut at the last cacheable block boundary, not with a checkpoint
    assert scheduler_cut(22, 0, 22, 4, False) == 20
    assert scheduler_cut(22, 0, 22, 4, True) == 22
    assert scheduler_cut(22, 20, 2, 4, False) == 2 and scheduler_cut(22, 0, 8, 4, False) == 8
