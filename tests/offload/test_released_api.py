"""vLLM's CPU offloading manager built and read by the names its release has, and its
policy's contract where the release's has no request hook or ranks by recency alone (moved
from tests/engine/test_released_api.py). No real earlier release is needed."""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import YOURS


def test_an_offloading_manager_is_built_and_read_by_the_names_its_release_has():
    # vLLM before 0.30: the constructor takes num_blocks (0.33: num_chunks), and 0.25's stats
    # have the usage gauge alone, read as the model's pinned and being-stored chunks together.
    from kvfuzz.fuzz.offload.checks import as_read, state_of
    from kvfuzz.impl.offload.release_api import pool_keyword

    class Old:
        def __init__(self, num_blocks, cache_policy="lru", enable_events=False):
            pass

    class New:
        def __init__(self, num_chunks, cache_policy="lru", enable_events=False):
            pass

    assert (pool_keyword(Old), pool_keyword(New)) == ("num_blocks", "num_chunks")
    model = {"pinned": 1, "writing": 2, "allocations": [3], "skipped": 0}
    old = state_of(([], "", [], None, [0, 0, 0], [-1, -1, 3, 0], None, []))["stats"]
    assert old == {"used": 3, "skipped": 0} and as_read(model, old) == {"used": 3, "skipped": 0}
    assert as_read(model, {**old, "used": 4}) != {**old, "used": 4}  # a wrong count still shows
    new = state_of(([], "", [], None, [0, 0, 0], [1, 2, -1, 0], [3], []))["stats"]
    assert as_read(model, new) == model == new


def test_an_offloading_manager_whose_policy_has_no_request_hook_gets_its_release_s_contract():
    # vLLM 0.24-0.30: the cache policies have no on_request_finished (no request ranks, a
    # recency order alone): judged by that release's contract (oracle/offload/contract.py),
    # where it was one "not supported" line (tests/offload/test_legacy_contract.py: the rest)
    from kvfuzz.fuzz.offload.target import release_contract, with_contract
    from kvfuzz.oracle.offload.contract import CURRENT, contract_of

    target = TARGETS["offload"]
    entry = target.catalogue.resolve("vllm.offload.lru")
    assert target.catalogue.declare is release_contract

    class LRUCachePolicy:  # 0.30's methods
        def touch(self, keys, req_context): pass
        def evict(self, n, protected): pass

    class CPUOffloadingManager:
        def _record_accesses(self, keys): pass

        def complete_store(self, keys, req_context, success=True):
            return "metadata_only"  # 0.33 publishes a failed store's removal

    judged = with_contract(entry, CPUOffloadingManager, LRUCachePolicy)
    assert contract_of(judged.preconditions).legacy
    later = type("LRUCachePolicy", (LRUCachePolicy,), {"on_request_finished": lambda s, r: 0,
                                                       "on_request_access": lambda s, k, r: 0})
    assert with_contract(entry, CPUOffloadingManager, later) == entry
    assert contract_of(entry.preconditions) is CURRENT
    own = replace(entry, kind=YOURS, mutates=())  # a class of one's own: as it declares
    assert release_contract(own, object) is own


def test_an_lru_policy_that_ranks_by_recency_alone_is_read_in_its_order():
    # vLLM 0.31 and 0.32's LRUCachePolicy keeps one int rank a key (recency), 0.33's a
    # (request rank, -position) pair: the state read takes either, in the policy's order (the
    # int read as 0.33 writes a key without a position, (rank, 0)), where it raised on the int.
    from types import SimpleNamespace

    from kvfuzz.impl.offload.driver import OffloadDriver, offload_key

    def view(ranks: dict):
        keys = {offload_key(key): rank for key, rank in ranks.items()}
        policy = SimpleNamespace(chunks=dict.fromkeys(keys), _ranks=keys,
                                 _evictable=set(list(keys)[:1]))
        driver = object.__new__(OffloadDriver)
        driver.manager, driver.plain = SimpleNamespace(_policy=policy), {}
        return driver.policy_view()

    recency = view({(1001, 0): 7, (1002, 0): 3, (2001, 1): 5})
    assert recency == {"order": [1002, 0, 2001, 1, 1001, 0], "evictable": [1001, 0]}
    ranked = view({(1001, 0): (2, -1), (1002, 0): (2, -3), (2001, 1): (1, 0)})
    assert ranked["order"] == [2001, 1, 1002, 0, 1001, 0]
