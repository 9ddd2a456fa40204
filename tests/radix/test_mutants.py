"""Each broken SGLang `RadixCache` (the released source with one edit, at least one per property
the lock step checks) and `PureSWARadixCache` (its window, its SWA sizes, its eviction ask) is caught by the seeded lock step with a readable, shrunk report that names
the op, the property and the replay command; the released class agrees on the shrunk trace.
Skips without SGLang."""

from tests.helpers import mutant_tests

PREFIX = "mutant.sglang.radix."
EXPECTED = {PREFIX + name: pattern for name, pattern in {
    "limit_matches_last_token": r"match +matched \d+ tokens, expected \d+",
    # the reversed path shows in a match's indices, or in the row a checkpoint rewrites from it
    "path_out_of_order": r"match +device indices of the \d+ matched tokens|row +r\d+'s row: "
                         r"expected",
    "short_key_walks": r"crash +IndexError: RadixKey child range out of bounds",
    "unlock_counts_shared_twice": r"evictable_size\(\) says \d+, its unlocked nodes hold \d+: "
                                  r"\d+ tokens counted twice",
    "unlock_keeps_protected": r"protected_size\(\) says \d+, its locked nodes hold \d+: "
                              r"\d+ tokens counted twice",
    "split_child_stale_key": r"is filed under edge \(.*\), not its first page",
    "lock_leaf_twice": r"lock counts not monotone|lock expected \d+, actual \d+",
    "locked_leaf_evictable": r"locked node evicted:? +r\d+ holds a lock on",
    "evict_stops_short": r"evict\(\d+\) freed \d+ tokens while \d+ were evictable: short",
    "parent_keeps_child_priority": r"eviction order:? +(evicted|kept) the page ending",
    "split_drops_hit_count": r"hits expected \d+, actual \d+",
    "match_keeps_access_time": r"access time out of the model's order",
    "insert_keeps_caller_value": r"aliasing +the tensor the caller passed to insert",
    "insert_keeps_partial_page": r"holds \d+ slots for \d+ tokens",
    "prompt_split_by_identity": r"priority expected \d+, actual \d+",
    "split_child_takes_upper_slots": r"\d+ slots twice in the tree",
    "checkpoint_frees_inserted": r"pages both in the tree and on the free list",
    "evict_leaks_slots": r"\d+ tokens lost",
    "split_removes_child_blocks": r"events +\d+ cached pages never announced",
}.items()}
# PureSWARadixCache's, on the window traces (their entries declare the window)
PURE_SWA = PREFIX + "pure_swa."
EXPECTED.update({PURE_SWA + name: pattern for name, pattern in {
    "swa_evictable_reads_protected": r"swa_evictable_size\(\) says \d+, its unlocked nodes hold "
                                     r"\d+: \d+ tokens missing from the count",
    "evict_takes_smaller_ask": r"evict\(\d+\) freed \d+ tokens while \d+ were evictable: short",
    "window_one_short": r"window cursor: +r\d+'s window cursor went from \d+ to \d+, expected",
    "window_one_long": r"window cursor: +r\d+'s window cursor went from \d+ to \d+, expected",
    "supports_swa_false": r"window cursor: +r\d+'s window cursor went from \d+ to \d+, expected",
    "draft_window_dropped": r"swa_retain_window: +built with window \d+ and draft_swa_window "
                            r"\d+ it keeps \d+, expected \d+",
}.items()})


test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("radix", EXPECTED, lambda name: "sglang.radix.pure_swa.window"
                 if name.startswith(PURE_SWA) else "sglang.radix")
