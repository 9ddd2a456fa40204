"""The rule of which states a Mamba "align" table keeps (`oracle/kvmanager/mamba_align.py`), on
hand-made tables: each way a table can break it is named (quick: no vLLM; the released class
and the mutants on seeded traces are in `test_align.py`)."""

import pytest

from kvfuzz.oracle.kvmanager.mamba_align import hit_key, kept_positions, table_problems


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
