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


def test_the_sizes_round_trip_and_vllms_refusals_are_one_line_errors():
    import pytest

    from kvfuzz.strategies.inputs import FormatError
    from kvfuzz.strategies.kvmanager import codec, hybrid
    from kvfuzz.strategies.kvmanager.trace import to_json

    trace = hybrid.GENERATOR.generate(0, 3)
    assert codec.from_json(to_json(trace)) == trace and trace.note == "profile hybrid sizes"
    base = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 8, "block_size": 4, "window": 3,
            "max_model_len": 64, "ops": []}
    for change, field in (({"window_block_size": 2, "window": 0}, "window_block_size"),
                          ({"hash_block_size": 3}, "hash_block_size"),
                          ({"hash_block_size": 2, "window": 0}, "hash_block_size"),
                          ({"window_block_size": 8, "retention": 4}, "retention")):
        with pytest.raises(FormatError) as error:
            codec.from_json(base | change)
        assert field in str(error.value) and "\n" not in str(error.value)


def test_chunked_local_attention_hits_and_frees_by_chunk():
    # Blocks of 2, chunks of 4 tokens: a token attends to its own chunk only.
    model = KVManagerModel(blocks=20, block_size=2, window=0, max_model_len=100,
                           local_chunk=4)
    tokens = list(range(1, 8))  # 7 tokens
    got, _ = admit(model, 1, tokens)
    # Computed 0 at the check: 4 + 4 blocks; then nothing before the first chunk is freed.
    assert got == [[1, 2, 3, 4], [5, 6, 7, 8]]
    # The next step (7 computed): chunk 0 (tokens 0-3, blocks 5 and 6) is out; latest first.
    hashes = chain(tokens + [9], 2)
    model.allocate_slots(1, hashes, 8, 7, 1, 0, None, tokens=tokens + [9])
    assert model.block_ids(1) == [[1, 2, 3, 4], [0, 0, 7, 8]] and model.freed_by_window == 2
    model.take_marks()
    # A resend of 8 tokens hits 7 at most: chunk 1 starts at 4, the blocks before it null.
    blocks, hit, boundary = model.get_computed_blocks(chain(tokens + [9], 2), 8)
    assert (blocks, hit, boundary) == ([[1, 2, 3], [0, 0, 7]], 6, 0)
    assert model.take_marks() == ["chunked-local hit: blocks before the chunk null"]


def test_a_mamba_group_keeps_the_last_state_alone():
    # Caching off (vLLM refuses modes none and all with it on); blocks of 2.
    model = KVManagerModel(blocks=20, block_size=2, window=0, max_model_len=100,
                           caching=False, mamba_mode="none")
    tokens = list(range(1, 6))  # 5 tokens
    got, (blocks, hit, _) = admit(model, 1, tokens)
    assert (blocks, hit, got) == ([[], []], 0, [[1, 2, 3], [4, 5, 6]])
    # The next step (5 computed): the states before token 4 go, latest first, to the head.
    model.allocate_slots(1, chain(tokens + [9], 2), 6, 5, 1, 0, None, tokens=tokens + [9])
    assert model.block_ids(1) == [[1, 2, 3], [0, 0, 6]] and model.pool.free[:2] == [5, 4]
    # Its table is handed out whole, not clipped to the computed tokens (not attention).
    assert model.block_ids_for_computed_tokens(1, 2) == [[1], [0, 0, 6]]


def test_a_class_without_a_scheduler_block_size_runs_no_trace_of_two_sizes():
    from kvfuzz.strategies.kvmanager import hybrid, released

    lacking = (released.NO_SCHEDULER_BLOCK,)
    traces = [hybrid.GENERATOR.generate(0, index) for index in range(12)]
    two_sizes = [t for t in traces if t.scheduler_block_size != t.block_size]
    one_size = [t for t in traces if t.scheduler_block_size == t.block_size]
    assert two_sizes and one_size
    assert all(released.broken(t, lacking) == [f"a trace with a setting the class does not "
                                               f"take: {released.NO_SCHEDULER_BLOCK}"]
               for t in two_sizes)
    assert not any(released.broken(t, lacking) for t in one_size)
