"""The KV-cache-manager oracle over a sliding window alone (`Trace.lone`: a model whose every
layer is sliding window, one `SlidingWindowSpec` group under vLLM 0.33.0's unitary coordinator):
the window's own hit rule over the whole prompt (no full-attention hit to stay within, no
look further with EAGLE), EAGLE's run a block longer then dropped, the block mask a block later,
the window's frees; and the codec's one-line refusals. Pure Python, no vLLM."""

import pytest

from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.hashing import chain
from kvfuzz.strategies.kvmanager.trace import Trace, to_json
from tests.kvmanager.test_oracle_hybrid import admit

# Blocks of 4, a window of 5 (one block for a hit; two with EAGLE's), retention 0 (the
# engine's default: only the blocks a replay of the prompt can stop on are cached)
SIZES = dict(blocks=30, block_size=4, window=5, max_model_len=100, retention=0, lone=True)


def lookup(model, tokens):
    return model.get_computed_blocks(chain(tokens, model.h), len(tokens))


def cached(model, blocks):
    return [b for b in blocks if model.pool.key[b] is not None]


def test_a_lone_window_is_one_group_of_the_windows_kind():
    model = KVManagerModel(**SIZES)
    assert model.groups == (0,) and model.second == 0
    got, _ = admit(model, 1, list(range(1, 21)))
    assert got == [[1, 2, 3, 4, 5]]  # one table: the window's
    # a window of 5 skips the tokens before the last 4 once 20 are computed: blocks 0 to 3
    assert model.skipped_tokens(0, 20) == 16


def test_eagle_keeps_the_run_a_block_later_and_its_hit_drops_the_last_block():
    plain, eagle = KVManagerModel(**SIZES), KVManagerModel(**SIZES, eagle=True)
    for model in (plain, eagle):
        admit(model, 1, list(range(1, 21)))
    # Without EAGLE: the block before the resend's boundary (19 -> 16). With it the resend
    # stops at 16 - 4 = 12 and a longer sibling at 20 - 4 = 16, each run of two ending a block
    # past it: blocks 2 to 4 of the table (ids 3, 4, 5).
    assert cached(plain, range(1, 6)) == [4]
    assert cached(eagle, range(1, 6)) == [3, 4, 5]
    # A resend (19 tokens at most): the window's run alone, nulls before it; EAGLE's run of
    # two (ids 3, 4) less its last block. The unitary coordinator looks no further than 19.
    assert lookup(plain, list(range(1, 21))) == ([[0, 0, 0, 4]], 16, 0)
    assert lookup(eagle, list(range(1, 21))) == ([[0, 0, 3]], 12, 0)
    assert "EAGLE: a window hit drops its last block" in eagle.take_marks()
    # A longer sibling (22 tokens, the first 20 the same): its run ends a block later (ids 4, 5)
    assert lookup(eagle, list(range(1, 21)) + [98, 99]) == ([[0, 0, 0, 4]], 16, 0)


def test_a_lone_window_keeping_the_unshifted_mask_cuts_the_longer_siblings_hit():
    """What vLLM's survivor `use_eagle = -1 in drop_eagle_group_ids` does to the one group
    (its manager caches as without EAGLE, its lookup still drops a block), written into the
    oracle: the property above tells it apart."""
    broken = KVManagerModel(**SIZES, eagle=True)
    broken.dropping = (False,)  # the manager's bit: the mask unshifted
    admit(broken, 1, list(range(1, 21)))
    # the replay boundaries are the coordinator's (12, 16), each with a run of one, unshifted
    assert cached(broken, range(1, 6)) == [3, 4]
    broken.dropping = (True,)  # the coordinator's lookup still drops
    # the sibling finds no block 5 to peek at: its hit stops a block short of the release's
    assert lookup(broken, list(range(1, 21)) + [98, 99]) == ([[0, 0, 3]], 12, 0)


def _trace(**settings) -> dict:
    return to_json(Trace(8, 4, 5, 64, (), lone=True)) | settings


def test_the_lone_field_round_trips_and_its_refusals_name_the_field():
    trace = from_json(_trace())
    assert trace.lone and trace.sizes == (4,) and "sliding window 5 alone" in trace.describe()
    for bad in (dict(window=0), dict(hash_block_size=2), dict(window_block_size=8),
                dict(eagle_groups=[0]), dict(prefill_lookahead=2)):
        with pytest.raises(FormatError, match="lone"):
            from_json(_trace(**bad))
