"""Each broken vLLM `BlockPool` (the released source with one edit) is caught by the seeded lock
step with a readable, shrunk report that names the op, the field or invariant, and the replay
command; the released class agrees on the shrunk trace. Skips without vLLM."""

from tests.helpers import mutant_tests

PREFIX = "mutant.vllm.blockpool."
EXPECTED = {PREFIX + name: pattern for name, pattern in {
    "freed_uncached_reused_last": r"free queue:? +first difference",
    "freed_cached_reused_first": r"free queue:? +first difference",
    "reuse_keeps_hash": r"block hash:? +block \d+: expected no hash",
    "touch_leaves_on_queue": r"num free:? +expected \d+, actual \d+",
    "touch_counts_twice": r"ref_cnt:? +block \d+: expected \d+, actual \d+",
    "exact_fit_refused": r"None vs success:? +expected blocks \[",
    "null_block_cached": r"block hash:? +block 0: expected no hash|null block \(0\) is cached",
    "lookup_newest_duplicate": r"result:? +get_cached_block",
    "pop_drops_last_duplicate": r"hash map:? +hash \d+ group \d+: expected blocks \[\d+\], "
                                r"actual None",
    "reset_while_held": r"result:? +reset_prefix_cache: expected False, actual True",
    "unpinned_reused_first": r"free queue:? +first difference",
    "evict_spares_held": r"block hash|hash map",
    "free_dedups": r"num free|ref_cnt|free queue",
    "stored_parent_is_itself": r"KV events:? +cache_full_blocks: event \d+ of \d+ expected",
    "reuse_not_published": r"KV events:? +(get_new_blocks|evict_blocks): .*Removed",
    "reset_not_published": r"KV events:? +reset_prefix_cache: .*Cleared",
    "partial_entry_one_unit_long": r"result|crash|hash map|block hash",
    "copy_forgets_token_count": r"block hash tokens:? +block \d+'s entry covers: expected \d+ "
                                r"tokens, actual None",
    "usage_counts_null_block": r"usage:? +get_usage\(\): expected",
    "lookahead_one_short": r"KV events:? +cache_full_blocks: .*lookahead",
}.items()}


test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("blockpool", EXPECTED, lambda name: "vllm.blockpool")
