"""The offload judge's oracle-free properties on hand-made answers (no vLLM needed): the policy's
memory bounded by the pool. The released policies' mutants that break it are in
test_mutants.py (`lru_evict_keeps_rank`)."""

from kvfuzz.fuzz.offload.checks import policy_memory

CACHE = [((1, 0), 0, 0), ((2, 0), -1, 1)]  # (key, reference count, chunk)


def test_records_only_of_keys_in_the_cache_and_ghosts_within_the_capacity_pass():
    assert policy_memory([(1, 0), (2, 0)], CACHE, {"b1": [(3, 0)], "b2": []}, 2) == []


def test_a_record_kept_for_a_key_that_left_the_cache_is_reported():
    problems = policy_memory([(1, 0), (2, 0), (7, 1)], CACHE, {}, 2)
    assert problems == [("policy memory", "the policy keeps a record of 1 key(s) not in the "
                                          "cache: [(7, 1)]")]


def test_a_ghost_list_over_the_capacity_is_reported():
    problems = policy_memory([], [], {"b1": [(3, 0), (4, 0), (5, 0)], "b2": [(6, 0)]}, 2)
    assert problems == [("policy memory", "ghost list b1 holds 3 keys, over the capacity 2")]
