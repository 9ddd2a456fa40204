"""Broken variants of the released vLLM CPU offloading manager (vllm 0.33.0): ONE edit inside one
method of the manager or of one cache policy each (`impl/source_mutation.py`), built on first
use; each breaks a promise the offloading connector relies on. A manager mutant is the edited
module's class; a policy mutant is the released manager whose policy object is made from the
edited policy module (the manager picks its policy class from a registry by name, so a new
instance is swapped in right after construction, while the cache is still empty). They need
vllm installed; the tests that run them skip without it."""

from __future__ import annotations

import functools
import importlib

from kvfuzz.impl.source_mutation import Mutation, mutant_module
from kvfuzz.impl.upstream_env import prepare_import

MANAGER = "vllm.v1.kv_offload.cpu.manager"
LRU = "vllm.v1.kv_offload.cpu.policies.lru"
ARC = "vllm.v1.kv_offload.cpu.policies.arc"
M, L, A = "CPUOffloadingManager", "LRUCachePolicy", "ARCCachePolicy"

# name -> (module, the policy whose traces it runs, mutation)
MUTATIONS = {
    "arc_evicts_loading": (ARC, "arc", Mutation(
        f"{A}.evict", "if chunk.ref_cnt == 0 and key not in protected:",
        "if chunk.ref_cnt >= 0 and key not in protected:",
        "ARC evicts a chunk that loads are reading")),
    "arc_evicts_storing": (ARC, "arc", Mutation(
        f"{A}.evict", "if chunk.ref_cnt == 0 and key not in protected:",
        "if chunk.ref_cnt <= 0 and key not in protected:",
        "ARC evicts a chunk whose store is in flight")),
    "lru_evicts_offered": (LRU, "lru", Mutation(
        f"{L}.evict", "if key in protected:", "if key in ():",
        "LRU evicts a chunk offered in the same prepare_store (already stored, it must stay)")),
    "lru_touch_in_order": (LRU, "lru", Mutation(
        f"{L}.touch", "self._update_recency(reversed(list(keys)))",
        "self._update_recency(list(keys))",
        "touch leaves the last key most recent instead of the first")),
    "lru_finish_tail_recent": (LRU, "lru", Mutation(
        f"{L}.on_request_finished",
        "self._update_recency(reversed(order_request_keys(key_groups, req_context)))",
        "self._update_recency(order_request_keys(key_groups, req_context))",
        "a finished request's tail ends most recent: its head is evicted first")),
    "arc_touch_promotes_storing": (ARC, "arc", Mutation(
        f"{A}.touch", "if not chunk.is_ready:", "if False:",
        "a touch of a chunk still being stored moves it to T2, as if reused")),
    "arc_no_t1_fallback": (ARC, "arc", Mutation(
        f"{A}.evict",
        "if candidate is None:\n                entry = next_candidate(t1_iter)\n",
        "if candidate is None:\n                entry = None\n",
        "ARC refuses once T2 has no candidate although T1 has (the fault #55461 fixed)")),
    "load_done_not_counted": (MANAGER, "lru", Mutation(
        f"{M}.complete_load", "self._num_evictable_cache_chunks += 1", "pass",
        "a chunk whose last load completes is not counted evictable again")),
    "failed_store_still_writing": (MANAGER, "arc", Mutation(
        f"{M}.complete_store",
        "self._num_write_pending_chunks -= 1\n                    self._policy.remove(key)",
        "self._policy.remove(key)",
        "a failed store still counts as a write in flight (usage, write usage)")),
    "store_done_stays_pending": (MANAGER, "lru", Mutation(
        f"{M}.complete_store", "chunk.ref_cnt = 0", "pass",
        "a completed store leaves its chunk unreadable (lookup says HIT_PENDING for good)")),
    "failed_store_kept": (MANAGER, "arc", Mutation(
        f"{M}.complete_store", "self._policy.remove(key)", "pass",
        "a failed store leaves its key in the cache, on a chunk that is free again")),
    "eviction_not_announced": (MANAGER, "lru", Mutation(
        f"{M}.prepare_store", "if to_evict and self.events is not None:", "if False:",
        "chunks evicted by a store get no removed event")),
    "pending_lookup_hits": (MANAGER, "arc", Mutation(
        f"{M}.lookup", "if not chunk.is_ready:", "if False:",
        "lookup says HIT for a chunk whose store is still in flight")),
    "threshold_one_short": (MANAGER, "lru", Mutation(
        f"{M}.prepare_store", "if self.counts.get(key, 0) >= self.store_threshold",
        "if self.counts.get(key, 0) > self.store_threshold",
        "with a store threshold, a chunk is stored one offer later than the threshold")),
    "lru_evict_keeps_rank": (LRU, "lru", Mutation(
        f"{L}.evict", "del self._ranks[key]", "pass",
        "LRU keeps the rank of every chunk it evicts: its memory grows with every key ever "
        "stored")),
    "empty_pool_used": (MANAGER, "lru", Mutation(
        f"{M}.get_stats", "if self._num_chunks > 0 else 0.0", "if self._num_chunks > 0 else 1.0",
        "a pool of no chunks reports itself fully used")),
    "exact_fit_refused": (MANAGER, "arc", Mutation(
        f"{M}.prepare_store", "if num_chunks_to_evict > self._num_evictable_cache_chunks:",
        "if num_chunks_to_evict >= self._num_evictable_cache_chunks:",
        "a store that needs exactly the evictable chunks is refused")),
}


@functools.cache
def _mutant_class(name: str) -> type:
    module, _, mutation = MUTATIONS[name]
    edited = mutant_module(module, mutation, f"vllm_offload_{name}")
    if module == MANAGER:
        return getattr(edited, M)
    with prepare_import(MANAGER):
        released = getattr(importlib.import_module(MANAGER), M)
    policy = getattr(edited, mutation.scope.split(".")[0])

    class Mutant(released):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if type(self._policy).__name__ == policy.__name__:  # the policy it was made from
                self._policy = policy(cache_capacity=self._num_chunks)

    Mutant.__name__ = Mutant.__qualname__ = name
    return Mutant


def __getattr__(name: str):
    if name not in MUTATIONS:
        raise AttributeError(name)
    return _mutant_class(name)
