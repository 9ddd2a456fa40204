"""The KV-cache-manager oracle over groups of different block sizes, hashed per fewer tokens
than a block (vLLM 0.33.0's hybrid coordinator, docs/upstream-vllm.md): hits and caching cut to
the scheduler block (the least common multiple of the groups' block sizes), a sliding window's
run ending on it, a dense window caching only the blocks a hit can end on, full attention's
partial entry at the prompt's last hash boundary. Answers from the released source, not from
running vLLM: pure Python."""

from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.kvmanager.hashing import chain


def admit(model, rid, tokens):
    hashes = chain(tokens, model.h)
    blocks, hit, boundary = model.get_computed_blocks(hashes, len(tokens))
    got = model.allocate_slots(rid, hashes, len(tokens), 0, len(tokens) - hit, hit, blocks,
                               prompt_tokens=len(tokens), shared_boundary=boundary,
                               tokens=tokens)
    return got, (blocks, hit, boundary)


def test_a_hit_and_what_a_step_caches_end_on_the_scheduler_block():
    # Full attention in blocks of 2, the window in blocks of 4: scheduler blocks of 4.
    model = KVManagerModel(blocks=20, block_size=2, window=3, max_model_len=100,
                           window_block_size=4, hash_block_size=2)
    got, _ = admit(model, 1, list(range(1, 10)))  # 9 tokens: 5 + 3 blocks
    assert got == [[1, 2, 3, 4, 5], [6, 7, 8]]
    # 9 tokens cache 8: four full-attention blocks, two of the window's, not the fifth of 2.
    assert [model.pool.key[b] is not None for b in range(1, 9)] == \
        [True] * 4 + [False] + [True, True, False]
    model.take_marks()
    # Three full-attention blocks (6 tokens) hit; the hit is cut to 4, the window's one block.
    blocks, hit, boundary = model.get_computed_blocks(chain([1, 2, 3, 4, 5, 6, 99, 98], 2), 8)
    assert (blocks, hit, boundary) == ([[1, 2], [6]], 4, 0)
    assert model.take_marks() == ["hit cut to the scheduler block size"]


def test_a_window_run_must_end_on_the_scheduler_block():
    # The window in blocks of 2, full attention in blocks of 4; a window of 4 needs 2 blocks.
    model = KVManagerModel(blocks=20, block_size=4, window=4, max_model_len=100,
                           window_block_size=2, hash_block_size=2)
    got, _ = admit(model, 1, list(range(1, 10)))
    assert got == [[1, 2, 3], [4, 5, 6, 7, 8]]
    model.evict_blocks({7})  # the window's block ending at token 8, on the grid
    model.take_marks()
    blocks, hit, boundary = model.get_computed_blocks(chain(list(range(1, 9)) + [50], 2), 9)
    # Block 6 ends at token 6, inside a scheduler block: passed. The run of 4, 5 ends at 4.
    assert (blocks, hit, boundary) == ([[1], [4, 5]], 4, 8)
    assert model.take_marks() == ["window hit: a block off the scheduler grid passed"]


def test_a_dense_window_caches_only_the_blocks_a_hit_can_end_on():
    # A window of 2 needs one block of 2; scheduler blocks of 4: only every second block.
    model = KVManagerModel(blocks=20, block_size=4, window=2, max_model_len=100,
                           window_block_size=2, hash_block_size=2)
    admit(model, 1, list(range(1, 10)))
    assert [model.pool.key[b] is not None for b in (4, 5, 6, 7)] == [False, True, False, True]
    assert "dense window: blocks between hit points uncached" in model.take_marks()


def test_full_attention_names_the_prompts_last_hash_boundary_inside_a_block():
    # One block size of 4, hashed per 2: a prompt of 8 tokens is hit at most up to token 7,
    # whose hash boundary (6) is inside full attention's second block.
    model = KVManagerModel(blocks=20, block_size=4, window=3, max_model_len=100,
                           hash_block_size=2)
    tokens = list(range(1, 9))
    admit(model, 1, tokens)
    partial = (chain(tokens, 2)[2], 0)
    assert model.pool.key[2] == (chain(tokens, 2)[3], 0) and model.pool.extra[2] == [partial]
    assert model.pool.map[partial] == [2]
    assert "partial entry registered" in model.take_marks()
    # Without fine-grained hits (no Mamba "align" group) a lookup never lands on it.
    blocks, hit, _ = model.get_computed_blocks(chain(tokens[:6] + [77], 2), 7)
    assert (blocks, hit) == ([[1], [3]], 4)
