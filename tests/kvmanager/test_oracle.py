"""The KV-cache-manager oracle on hand-made cases whose answers come from the contract (vLLM
0.33.0's released source, docs/upstream-vllm.md), not from running vLLM: the last token is never
a hit, hits are the longest cached chain, free blocks touched by a hit count against admission,
a refused allocation changes nothing, tables are freed tail first, sliding-window blocks are
freed as the window moves. Pure Python: runs without vLLM."""

import pytest

from kvfuzz.oracle.kvmanager.model import KVManagerModel, NothingToAllocate
from kvfuzz.strategies.kvmanager.hashing import NONE_HASH, block_hash, chain


def admit(model, rid, tokens, chunk=10**4, computed=0):
    hashes = chain(tokens, model.bs)
    blocks, hit, _ = model.get_computed_blocks(hashes, len(tokens))
    new = min(chunk, len(tokens) - hit)
    return model.allocate_slots(rid, hashes, len(tokens), computed, new, hit, blocks,
                                tokens=tokens), hit


def test_hash_chain_is_vllms_shape():
    """Block i's hash covers tokens [0, (i+1) * block_size): the same block after different
    prefixes hashes differently, and a partial block has no hash."""
    assert len(chain([1, 2, 3, 4, 5], 2)) == 2
    assert chain([1, 2, 3, 4], 2)[1] != chain([9, 9, 3, 4], 2)[1]
    assert chain([1, 2], 2)[0] == int.from_bytes(block_hash((NONE_HASH, (1, 2), None)), "big")


def test_last_token_is_never_a_hit():
    model = KVManagerModel(blocks=10, block_size=2, window=0, max_model_len=100)
    admit(model, 1, [1, 2, 3, 4])
    blocks, hit, boundary = model.get_computed_blocks(chain([1, 2, 3, 4], 2), 4)
    assert (blocks, hit, boundary) == ([[1]], 2, 0)  # 4 tokens, both blocks cached: 1 hits
    blocks, hit, _ = model.get_computed_blocks(chain([1, 2, 3, 4, 5], 2), 5)
    assert (blocks, hit) == ([[1, 2]], 4)


def test_hit_is_the_longest_cached_chain():
    model = KVManagerModel(blocks=10, block_size=2, window=0, max_model_len=100)
    admit(model, 1, [1, 2, 3, 4, 5, 6, 7])
    model.evict_blocks({2})
    blocks, hit, _ = model.get_computed_blocks(chain([1, 2, 3, 4, 5, 6, 7], 2), 7)
    assert (blocks, hit) == ([[1]], 2)  # block 3 is still cached but its parent is not


def test_free_cached_hits_count_against_admission_and_refusal_changes_nothing():
    model = KVManagerModel(blocks=4, block_size=2, window=0, max_model_len=100)
    admit(model, 1, [1, 2, 3, 4, 5])   # blocks 1, 2 full and cached, 3 partial
    model.free(1)
    # Tail first: the uncached partial block to the head, the cached ones to the tail, last first.
    assert model.pool.free == [3, 2, 1]
    before = (list(model.pool.free), list(model.pool.ref), dict(model.pool.map))
    # 7 tokens: hit 2 blocks (both free: touching them uses 2), 2 more needed; 3 free.
    got, hit = admit(model, 2, [1, 2, 3, 4, 5, 6, 7])
    assert (got, hit, model.predicted) == (None, 4, 4)
    assert (list(model.pool.free), list(model.pool.ref), dict(model.pool.map)) == before
    got, hit = admit(model, 3, [1, 2, 3, 4, 5])  # hit 2 + 1 new = 3 of 3 free: exact fit
    assert (got, hit, model.predicted) == ([[3]], 4, 3)
    assert model.block_ids(3) == [[1, 2, 3]] and model.pool.free == []


def test_sliding_window_frees_blocks_that_left_the_window():
    model = KVManagerModel(blocks=20, block_size=2, window=3, max_model_len=100)
    tokens = [1, 2, 3, 4, 5, 6, 7]
    got, _ = admit(model, 1, tokens)
    assert got == [[1, 2, 3, 4], [5, 6, 7, 8]]
    # The next step: 7 computed, the window keeps tokens 5..6 (and the new 7): blocks 0..1 of
    # the sliding-window table leave it (latest first), each to the free queue's head.
    got = model.allocate_slots(1, chain(tokens + [8], 2), 8, 7, 1, 0, None)
    assert got == [[], []]
    assert model.block_ids(1) == [[1, 2, 3, 4], [0, 0, 7, 8]]
    assert model.freed_by_window == 2 and model.pool.free[-2:] == [6, 5]


def test_sliding_window_hit_is_the_rightmost_run_within_the_full_hit():
    model = KVManagerModel(blocks=30, block_size=2, window=3, max_model_len=100)
    tokens = list(range(1, 12))
    admit(model, 1, tokens)
    blocks, hit, boundary = model.get_computed_blocks(chain(tokens, 2), len(tokens))
    # 11 tokens: up to 5 blocks; window 3 needs cdiv(2, 2) = 1 block: the fifth; null before it.
    assert hit == 10 and blocks[1] == [0, 0, 0, 0, model.tables[1][1][4]] and boundary == 0
    model.evict_blocks({model.tables[1][1][4]})
    blocks, hit, boundary = model.get_computed_blocks(chain(tokens, 2), len(tokens))
    assert hit == 8 and len(blocks[0]) == 4 and boundary == 10


def test_sparse_retention_caches_only_the_window_before_the_prompts_end():
    """Retention 0 (the engine's default): of a sliding-window table only the blocks a replay
    of the prompt can hit are cached: cdiv(window - 1, block_size) blocks before block
    (prompt - 1) // block_size. Full attention caches every full block."""
    model = KVManagerModel(blocks=20, block_size=2, window=3, max_model_len=100, retention=0)
    tokens = list(range(1, 10))
    hashes = chain(tokens, 2)
    got = model.allocate_slots(1, hashes, 9, 0, 9, 0, [[], []], prompt_tokens=9)
    full, window = got
    assert [model.pool.key[b] is not None for b in full] == [True] * 4 + [False]
    assert [model.pool.key[b] is not None for b in window] == [False, False, False, True, False]


def test_whole_request_check_refuses_a_chunk_that_alone_would_fit():
    """full_sequence_must_fit: an admission first counts the blocks of the whole request."""
    tokens = list(range(1, 13))
    for whole, expected in ((False, [[1]]), (True, None)):
        model = KVManagerModel(blocks=6, block_size=2, window=0, max_model_len=100)
        got = model.allocate_slots(1, chain(tokens, 2), 12, 0, 2, 0, [[]], whole=whole)
        assert got == expected
        assert model.pool.num_free() == (4 if got else 5)


# The configurations beyond one full-attention group with prefix caching (docs/upstream-vllm.md).
def test_without_caching_nothing_is_looked_up_or_cached():
    model = KVManagerModel(blocks=8, block_size=2, window=0, max_model_len=100, caching=False)
    admit(model, 1, [1, 2, 3, 4, 5])
    assert model.pool.map == {} and model.get_computed_blocks(chain([1, 2, 3, 4, 5], 2), 5) == \
        ([[]], 0, 0)
    model.free(1)
    assert model.pool.free == [3, 2, 1, 4, 5, 6, 7]  # every freed block to the head


def test_a_request_that_skips_the_cache_hits_nothing_and_eagle_drops_a_block():
    model = KVManagerModel(blocks=10, block_size=2, window=0, max_model_len=100, eagle=True)
    tokens = [1, 2, 3, 4, 5, 6, 7]
    admit(model, 1, tokens)
    assert model.get_computed_blocks(chain(tokens, 2), 7, tokens, skip=True) == ([[]], 0, 0)
    blocks, hit, _ = model.get_computed_blocks(chain(tokens, 2), 7)
    assert (blocks, hit) == ([[1, 2]], 4)  # 3 cached blocks hit; EAGLE recomputes the last


def test_lookahead_tokens_get_slots_and_are_not_cached():
    model = KVManagerModel(blocks=10, block_size=2, window=0, max_model_len=100, lookahead=3)
    tokens = [1, 2, 3, 4]
    got, _ = admit(model, 1, tokens)
    assert got == [[1, 2, 3, 4]]              # 4 tokens + 3 draft slots: 4 blocks
    assert [model.pool.key[b] is not None for b in got[0]] == [True, True, False, False]


def test_a_step_of_no_new_tokens_adopts_a_hit_or_is_refused():
    model = KVManagerModel(blocks=10, block_size=2, window=0, max_model_len=100)
    tokens = [1, 2, 3, 4, 5]
    admit(model, 1, tokens)
    blocks, hit, _ = model.get_computed_blocks(chain(tokens, 2), 5)
    assert model.allocate_slots(2, chain(tokens, 2), 5, 0, 0, hit, blocks) == [[]]
    assert model.block_ids(2) == [[1, 2]] and model.pool.ref[1:3] == [2, 2]
    before = (list(model.pool.free), list(model.pool.ref))
    with pytest.raises(NothingToAllocate, match="no new tokens and no hit"):
        model.allocate_slots(3, chain(tokens, 2), 5, 0, 0, 0, [[]])
    assert (list(model.pool.free), list(model.pool.ref)) == before


def test_tokens_in_flight_hold_the_window_back_and_retained_tokens_stay():
    tokens = [1, 2, 3, 4, 5, 6, 7]
    for in_flight, retained, kept in ((0, 0, [0, 0, 7, 8]), (2, 0, [0, 6, 7, 8]),
                                      (0, 2, [0, 6, 7, 8])):
        model = KVManagerModel(blocks=20, block_size=2, window=3, max_model_len=100,
                               retained=retained)
        admit(model, 1, tokens)
        model.allocate_slots(1, chain(tokens + [8], 2), 8, 7, 1, 0, None, in_flight=in_flight)
        assert model.block_ids(1)[1] == kept, (in_flight, retained)
    assert KVManagerModel(20, 2, 3, 100, max_in_flight_tokens=4, retained=4).admission_caps[1] == \
        KVManagerModel(20, 2, 3, 100, max_in_flight_tokens=4).admission_caps[1] + 2


def test_stats_events_and_reads():
    model = KVManagerModel(blocks=10, block_size=2, window=2, max_model_len=100, events=True,
                           stats=True)
    tokens = [1, 2, 3, 4, 5]
    admit(model, 1, tokens)
    stored = model.take_events()
    assert [(e.group, e.kind, e.window) for e in stored] == [
        (0, "full_attention", None), (1, "sliding_window", 2)]
    model.record_prefix_cache_stats(5, 0, preempted=False)
    model.record_prefix_cache_stats(5, 4, preempted=True)
    model.record_prefix_cache_stats(5, 4, preempted=False, skip=True)
    assert model.make_prefix_cache_stats() == (1, 5, 0, 1, 5, 4, False)
    assert model.make_prefix_cache_stats() == (0, 0, 0, 0, 0, 0, False)
    assert model.estimate_cached_tokens(1) == 4 and model.estimate_cached_tokens(9) == 0
    assert model.block_ids_for_computed_tokens(1, 3) == [[1, 2], [4, 5]]
    blocks, hit, _ = model.get_computed_blocks(chain(tokens, 2), 5, tokens, report=True)
    assert [e.hashes for e in model.take_events()] == [tuple(chain(tokens, 2))] * 2
    assert model.truncate(blocks, 2) == [blocks[0][:1], blocks[1][:1]]
    model.free(1)
    assert model.reset_prefix_cache() and model.make_prefix_cache_stats()[-1] is True
