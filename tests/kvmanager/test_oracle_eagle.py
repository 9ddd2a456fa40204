"""The KV-cache-manager oracle with EAGLE beside a sliding window (vLLM 0.33.0's hybrid
coordinator, `find_longest_cache_hit`'s EAGLE margin, `SlidingWindowManager`'s run a block
longer, `get_num_cacheable_tokens`' peek block, `replay_boundaries`): each group looks one of its
blocks past the candidate hit and drops one, and what a step caches keeps the block a later
lookup peeks at. Answers from the released source, not from running vLLM: pure Python."""

from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.kvmanager.hashing import chain
from tests.kvmanager.test_oracle_hybrid import admit


def lookup(model, tokens):
    return model.get_computed_blocks(chain(tokens, model.h), len(tokens))


def test_each_group_looks_a_block_further_then_drops_one():
    # Blocks of 4, a window of 5 (one block, two with EAGLE's): 8 tokens cached in both groups.
    eagle = KVManagerModel(blocks=20, block_size=4, window=5, max_model_len=100, eagle=True)
    plain = KVManagerModel(blocks=20, block_size=4, window=5, max_model_len=100)
    for model in (eagle, plain):
        got, _ = admit(model, 1, list(range(1, 9)))
        assert got == [[1, 2], [3, 4]]
    # A resend: the last token is never a hit; EAGLE looks to the prompt's end (its margin),
    # finds both blocks and drops the second; the window's run of two, less its last block.
    assert lookup(eagle, list(range(1, 9))) == ([[1], [3]], 4, 0)
    assert "EAGLE: a window hit drops its last block" in eagle.take_marks()
    # A longer prompt: without EAGLE both blocks hit, with it one (the drafter recomputes).
    assert lookup(plain, list(range(1, 10))) == ([[1, 2], [0, 4]], 8, 0)
    assert lookup(eagle, list(range(1, 10))) == ([[1], [3]], 4, 0)


def test_a_step_caches_the_block_past_the_scheduler_grid_that_a_lookup_peeks_at():
    # Full attention in blocks of 2, the window in blocks of 4 (scheduler blocks of 4), hashed
    # per 2: 11 tokens written cache 8 on the grid and, with EAGLE, full attention's block of
    # tokens 8-9 too (min(11, 8 + 2)).
    sizes = dict(blocks=20, block_size=2, window=5, max_model_len=100, window_block_size=4,
                 hash_block_size=2)
    eagle, plain = KVManagerModel(**sizes, eagle=True), KVManagerModel(**sizes)
    for model, cached in ((plain, 4), (eagle, 5)):
        got, _ = admit(model, 1, list(range(1, 12)))
        assert got == [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
        assert [model.pool.key[b] is not None for b in range(1, 7)] == \
            [True] * cached + [False] * (6 - cached)
    assert "EAGLE: a block past the scheduler grid cached" in eagle.take_marks()


def test_sparse_retention_keeps_the_runs_a_later_eagle_hit_ends_on():
    # Retention 0: the window's blocks are cached only where a replay of the prompt can stop.
    # A 20-token prompt in blocks of 4, a window of 5 (need 1 block; 2 with EAGLE's).
    sizes = dict(blocks=30, block_size=4, window=5, max_model_len=100, retention=0)
    plain, eagle = KVManagerModel(**sizes), KVManagerModel(**sizes, eagle=True)
    for model in (plain, eagle):
        got, _ = admit(model, 1, list(range(1, 21)))
        assert got == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    # Without EAGLE: the block before token 19's boundary (16). With it: a resend stops at
    # 16 - 4 = 12 and a longer sibling at 20 - 4 = 16, each run of two ending a block past it.
    assert [b for b in range(6, 11) if plain.pool.key[b] is not None] == [9]
    assert [b for b in range(6, 11) if eagle.pool.key[b] is not None] == [8, 9, 10]
    # The resend's EAGLE hit: full attention's five blocks less one, the window's 9, 10 less 10.
    assert lookup(eagle, list(range(1, 21))) == ([[1, 2, 3, 4], [0, 0, 0, 9]], 16, 0)
