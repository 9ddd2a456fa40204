"""The hit length beside a Mamba group in "align" mode (`oracle/kvmanager/align_hit.py`) on plain
data, no vLLM: blocks of 4 hashed per 2 tokens (fine-grained: partial entries inside a block
count) or per 4; hash units 10 to 15 (12 tokens). Keys are (hash, group): 0 full attention,
1 the Mamba group. What the reduced mode judges every admission by (`fuzz/kvmanager/align.py`);
its broken managers, caught on vLLM: `test_align.py`."""

from kvfuzz.oracle.kvmanager.align_hit import full_attention_hit, longest_hit, mamba_hit

UNITS = [10, 11, 12, 13, 14, 15]
# full attention's blocks 0 and 1 cached whole (keyed by their last units, 11 and 13)
BLOCKS = {(11, 0), (13, 0)}


def test_the_hit_is_the_mamba_state_at_full_attentions_run():
    assert longest_hit(UNITS, 13, 4, 2, BLOCKS | {(13, 1)}) == 8
    assert longest_hit(UNITS, 13, 4, 2, BLOCKS) == 0  # no state: no hit at all


def test_the_mamba_hit_falls_back_to_its_latest_state_below_full_attentions():
    assert longest_hit(UNITS, 13, 4, 2, BLOCKS | {(10, 1)}) == 2  # inside block 0
    assert longest_hit(UNITS, 13, 4, 2, BLOCKS | {(10, 1), (12, 1)}) == 6
    assert mamba_hit(UNITS, 8, 2, {(10, 1), (14, 1)}) == 2  # 10 tokens is past the cap


def test_a_state_deeper_than_full_attention_is_not_a_hit():
    # full attention holds block 0 only; the only Mamba state is at 8 tokens
    assert longest_hit(UNITS, 13, 4, 2, {(11, 0), (13, 1)}) == 0
    assert longest_hit(UNITS, 13, 4, 2, {(11, 0), (13, 1), (11, 1)}) == 4


def test_a_partial_entry_extends_full_attention_past_its_whole_blocks():
    partial = BLOCKS | {(14, 0)}  # a prompt's tail cached at 10 tokens, inside block 2
    assert full_attention_hit(UNITS, 12, 4, 2, partial) == 10
    assert longest_hit(UNITS, 13, 4, 2, partial | {(13, 1), (14, 1)}) == 10
    assert longest_hit(UNITS, 13, 4, 2, partial | {(13, 1)}) == 8
    # with no whole block, a partial entry inside block 0 alone
    assert full_attention_hit(UNITS, 12, 4, 2, {(10, 0)}) == 2
    # not past the first missing block: entries after it are unreachable
    assert full_attention_hit(UNITS, 12, 4, 2, {(13, 0), (14, 0)}) == 0


def test_the_last_token_is_never_a_hit():
    everything = {(unit, group) for unit in UNITS for group in (0, 1)}
    assert longest_hit(UNITS, 13, 4, 2, everything) == 12
    assert longest_hit(UNITS, 12, 4, 2, everything) == 10  # cap 11: the hash boundary at 10
    assert longest_hit(UNITS, 9, 4, 2, everything) == 8
    assert longest_hit(UNITS, 1, 4, 2, everything) == 0
    assert longest_hit(UNITS[:2], 13, 4, 2, everything) == 4  # only the hashed tokens


def test_hashed_per_block_probes_block_boundaries_only():
    units = [20, 21, 22]  # one per 4 tokens
    cached = {(20, 0), (21, 0), (20, 1), (21, 1)}
    assert longest_hit(units, 13, 4, 4, cached) == 8
    assert longest_hit(units, 13, 4, 4, cached - {(21, 1)}) == 4
    assert longest_hit(units, 8, 4, 4, cached) == 4  # cap 7


def test_a_rule_blind_to_partial_entries_is_told_apart():
    """The catalogue mutant `mamba_align_partial_hit_ignored`'s lookup as a rule: block
    boundaries only. It disagrees with the rule where a state inside a block is cached."""
    def blind(units, num_tokens, block_size, hash_size, cached):
        full = full_attention_hit(units, num_tokens - 1, block_size, hash_size, cached)
        return mamba_hit(units[block_size // hash_size - 1::block_size // hash_size],
                         full // block_size * block_size, block_size, cached)
    cached = BLOCKS | {(14, 0), (11, 1), (14, 1)}
    assert blind(UNITS, 13, 4, 2, cached) == 4
    assert longest_hit(UNITS, 13, 4, 2, cached) == 10
