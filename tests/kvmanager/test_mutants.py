"""Each broken vLLM `KVCacheManager` (and its parts) (the released source with one edit) is caught
by the seeded lock step with a readable, shrunk report that names the op, the field or invariant,
and the replay command; the released class agrees on the shrunk trace. Skips without vLLM."""

from tests.helpers import mutant_tests

PREFIX = "mutant.vllm.kvmanager."
EXPECTED = {PREFIX + name: pattern for name, pattern in {
    "last_token_hit": r"prefix hit:? +expected \d+ tokens|shared prefix boundary",
    "exact_fit_refused": r"None vs success:? +expected \[",
    # Caching one block more than the table holds: a hash on a block not yet written, or
    # (under sparse retention) vLLM's own mask-length assertion.
    "caches_unwritten_block": r"block hash|hash map|assert block_mask is None",
    "window_moves_early": r"result:? +allocate_slots|block table|free queue|num free|consumed",
    "free_first_group_only": r"num free|ref_cnt|lost",
    "evictable_hits_not_counted": r"Cannot get \d+ free blocks from the pool",
    "free_head_first": r"free queue:? +first difference",
    "hit_not_touched": r"ref_cnt|invariant|consumed",
    "window_keeps_first_block": r"block table|consumed|num free",
    "hybrid_hit_not_trimmed": r"prefix hit:? +expected \d+ tokens",
    "whole_request_unchecked": r"None vs success:? +expected None",
    "sparse_tail_one_block_early": r"block hash|hash map|prefix hit",
    "watermark_for_running": r"None vs success",
    # A reused block keeps its hash: kvfuzz sees the stale hash, or vLLM's own assertion fires
    # when the block is cached again.
    "pool_reuse_keeps_hash": r"block hash:? +block \d+: expected no hash|block_hash_num_tokens",
}.items()}


test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("kvmanager", EXPECTED, lambda name: "vllm.kvmanager")
