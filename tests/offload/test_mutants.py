"""Each broken vLLM CPU offloading manager (the released manager or one of its policies with one
edit) is caught by the seeded lock step, by the property it breaks, with a readable, shrunk
report that names the op, the keys and the replay command; the released class agrees on the
shrunk trace. Skips without vLLM."""

from kvfuzz.impl.offload.upstream_mutants import MUTATIONS
from tests.helpers import mutant_tests

PREFIX = "mutant.vllm.offload."
EXPECTED = {PREFIX + name: pattern for name, pattern in {
    # nothing evicted that a load reads, that is being stored, or that was offered
    "arc_evicts_loading": r"evicted in use:? +prepare_store evicted \(\d+, \d\) while a load",
    "arc_evicts_storing": r"evicted in use:? +prepare_store evicted \(\d+, \d\) while its store",
    "lru_evicts_offered": r"evicted in use:? +prepare_store evicted \(\d+, \d\) while it was "
                          r"offered",
    # the policy's order
    "lru_touch_in_order": r"what +policy order at op \d+ of \d+: touch",
    "lru_finish_tail_recent": r"what +policy order at op \d+ of \d+: finish",
    "arc_touch_promotes_storing": r"what +policy order at op \d+ of \d+: touch",
    "arc_no_t1_fallback": r"None vs success:? +prepare_store: expected \(\[",
    # sizes and usage
    "load_done_not_counted": r"sizes:? +evictable count \d+, but the cache holds \d+",
    "failed_store_still_writing": r"sizes:? +writing count \d+, but the cache holds \d+",
    "empty_pool_used": r"usage:? +pinned: expected 0, actual 1\.0",
    # the policy's memory bounded by the pool
    "lru_evict_keeps_rank": r"policy memory:? +the policy keeps a record of 1 key\(s\) not in "
                            r"the cache",
    # completed stores findable, failed ones not
    "store_done_stays_pending": r"stored not found:? +the store of \(\d+, \d\) completed, but "
                                r"lookup says HIT_PENDING",
    "failed_store_kept": r"failed store found:? +the store of \(\d+, \d\) failed, but lookup "
                         r"says HIT_PENDING",
    # the events against the cache
    "eviction_not_announced": r"events vs contents:? +\d+ announced stored are not stored",
    # every result the oracle's
    "pending_lookup_hits": r"result:? +lookup: first difference",
    "threshold_one_short": r"result:? +keys to store: first difference|None vs success:? "
                           r"+prepare_store: expected None, actual \(\[\], \[\]\)",
    "exact_fit_refused": r"None vs success:? +prepare_store: expected \(\[",
}.items()}


def _original(name: str) -> str:
    return f"vllm.offload.{MUTATIONS[name.removeprefix(PREFIX)][1]}"


test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("offload", EXPECTED, _original)
