"""Reference model of vLLM's CPU offloading manager (vllm 0.33.0,
`vllm/v1/kv_offload/cpu/manager.py` with `base.py`'s contract), in plain dicts; the policy is
`lru.py` or `arc.py`, the store threshold's tracker `threshold.py`. A key is (hash, group).
Releases before 0.31 promise less (`contract.py`: no request hooks, the threshold as it counted
then, no failed store's event; their LRU policy is `lru_recency.py`, before 0.24
`lru_insertion.py`; before 0.23 no request calls; on 0.20 no "retry later" lookup answer). The
contract, from the released source and its docstrings:

- Each key in the cache has a reference count: -1 while its store is in flight, 0 stored and
  evictable, n > 0 while n loads of it are in flight. Chunks in use = keys in the cache.
- `lookup(key)`: MISS when not in the cache, HIT_PENDING while its store is in flight, else HIT.
  It changes nothing.
- `prepare_load(keys)` (all stored: the caller looked them up): each count + 1, the key pinned
  (never evicted) until `complete_load` brings it back to 0. `touch(keys)`: the policy's.
- `prepare_store(keys)`: keys not in the cache are to store (with a store threshold t >= 2, only
  those offered in at least t calls: a tracker of at most `tracker_size` keys, oldest out first,
  never one offered in this call); their misses are shown to the policy once per request. When
  fewer chunks are free than needed, the policy evicts the shortfall among evictable keys, none
  of the keys offered; when it cannot, None (a refusal changes no chunk). Else the keys go in,
  being stored, and the result is (keys to store, keys evicted); an eviction is a "removed" event.
- `complete_store(keys, success)`: of the keys still being stored, on success each becomes
  stored (evictable; a "stored" event), on failure each leaves the cache (a "removed" event
  marked metadata-only: nobody was told it was there). Other keys are ignored.
- Requests: every key a request loads or offers (stored or to store) is recorded in its first
  order per group; `on_request_finished` hands the policy its keys in head-to-tail order (by
  position when all are known), the keys it only inserted and the keys it reused.
- `take_events()`: the events since the last call, in order; a metadata-only removal leaves out
  keys that are back in the cache (a retry), and is dropped when none is left.
- `reset_cache()`: every chunk free, the policy cleared, requests' records restarted; events not
  taken yet stay, the store threshold's tracker too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.oracle.offload.arc import ARCPolicy
from kvfuzz.oracle.offload.contract import CURRENT, Contract
from kvfuzz.oracle.offload.lru import LRUPolicy, RecencyRankLRUPolicy
from kvfuzz.oracle.offload.lru_insertion import InsertionLRUPolicy
from kvfuzz.oracle.offload.lru_recency import RecencyLRUPolicy
from kvfuzz.oracle.offload.threshold import Tracker

Key = tuple[int, int]
HIT, HIT_PENDING, MISS = "HIT", "HIT_PENDING", "MISS"
STORED, REMOVED, FAILED = "stored", "removed", "removed (failed store, metadata only)"
POLICIES = {"lru": LRUPolicy, "arc": ARCPolicy}
LEGACY_POLICIES = {"lru": RecencyLRUPolicy, "arc": ARCPolicy}  # before vLLM 0.31
EARLY_POLICIES = {"lru": InsertionLRUPolicy, "arc": ARCPolicy}  # before vLLM 0.24
RECENCY_RANKED = {"lru": RecencyRankLRUPolicy, "arc": ARCPolicy}  # vLLM 0.31, 0.32


@dataclass
class Access:
    """What one request did to the cache since it was first seen, in this cache generation."""

    generation: int
    groups: dict[int, list[Key]] = field(default_factory=dict)  # first-seen order per group
    inserted: set[Key] = field(default_factory=set)
    reused: set[Key] = field(default_factory=set)
    store_misses: set[Key] = field(default_factory=set)
    finished: bool = False

    def seen(self, key: Key) -> bool:
        return key in self.groups.get(key[1], ())


class OffloadModel:
    def __init__(self, policy: str, chunks: int, events: bool, store_threshold: int,
                 tracker_size: int, contract: Contract = CURRENT):
        self.chunks, self.threshold, self.tracker_size = chunks, store_threshold, tracker_size
        self.contract = contract
        self.policy = (EARLY_POLICIES if contract.lru_by_insertion else LEGACY_POLICIES
                       if contract.legacy else POLICIES if contract.positions else
                       RECENCY_RANKED)[policy](chunks)
        self.ref: dict[Key, int] = {}
        self.events: list | None = [] if events else None
        self.offers: Tracker | None = Tracker(tracker_size, contract.counting) \
            if store_threshold >= 2 else None
        self.skipped, self.allocations = 0, []   # since the last stats()
        self.generation = 0
        self.access: dict[int, Access] = {}
        self.positions: dict[int, dict[Key, int]] = {}

    # -- the manager's calls ---------------------------------------------------------------
    def new_request(self, rid: int, keys, positions) -> str | None:
        """The request's offloading policy; None where the manager is not told of a request
        (vLLM before 0.23)."""
        self.positions[rid] = dict(zip(keys, positions)) if positions is not None else {}
        self._access(rid)
        return "chunk_level" if self.contract.request_calls else None

    def lookup(self, rid: int, keys) -> list[str]:
        """The answers; changes nothing (the lock step asks it to plan: `looked_up` is the
        call's own effect)."""
        pending = HIT_PENDING if self.contract.pending_answer else MISS  # (vLLM 0.20: a miss)
        return [MISS if key not in self.ref else pending if self.ref[key] < 0 else HIT
                for key in keys]

    def looked_up(self, rid: int, keys) -> list[str]:
        """A caller's lookups: their answers, and (vLLM 0.24-0.28) each counted towards the
        store threshold."""
        if self.offers is not None:
            self.offers.looked_up(keys)
        return self.lookup(rid, keys)

    def prepare_load(self, rid: int, keys) -> None:
        for key in keys:
            assert self.ref[key] >= 0, f"the lock step loads {key}, which is not stored"
            if self.ref[key] == 0:
                self.policy.pin(key)
            self.ref[key] += 1
        self._record(rid, keys, reused=keys)

    def touch(self, rid: int, keys) -> None:
        self.policy.touch(keys, self.ref)

    def complete_load(self, rid: int, keys) -> None:
        for key in keys:
            self.ref[key] -= 1
            if self.ref[key] == 0:
                self.policy.unpin(key)

    def prepare_store(self, rid: int, keys):
        keys = list(keys)
        if self.offers is not None:
            self.offers.offered(keys)
        new = self._admitted(keys)
        if self.contract.request_hooks:
            self._store_accesses(rid, keys, new)
        if not new:
            return [], []
        self.allocations.append(len(new))
        shortfall = len(new) - (self.chunks - len(self.ref))
        evicted = []
        if shortfall > 0:
            if shortfall > sum(count == 0 for count in self.ref.values()):
                return None
            evicted = self.policy.evict(shortfall, set(keys), self.ref)
            if evicted is None:
                return None
            for key in evicted:
                del self.ref[key]
            self._event(REMOVED, evicted)
        for key in new:
            self.ref[key] = -1
            self.policy.insert(key, rid, self.positions[rid])
        self._access(rid).inserted.update(new)
        return new, evicted

    def _admitted(self, keys: list) -> list:
        """The keys of an offer not in the cache that the store threshold lets in. Before vLLM
        0.31 the threshold filters the whole offer first: a stored key under it counts as a
        skipped store too."""
        if self.offers is None:
            return [key for key in keys if key not in self.ref]
        candidates = keys if self.contract.legacy else [k for k in keys if k not in self.ref]
        counted = [key for key in candidates if self.offers.get(key) >= self.threshold]
        self.skipped += len(candidates) - len(counted)
        return [key for key in counted if key not in self.ref]

    def _store_accesses(self, rid: int, keys: list, new: list) -> None:
        """What a request's offer shows its policy (vLLM 0.31 on): new store misses, once per
        request, then its first accesses."""
        stored = [key for key in keys if self.ref.get(key, -1) >= 0]
        access = self._access(rid)
        misses = [key for key in new if key not in access.store_misses]
        if misses:
            self.policy.on_store_miss(misses, self.ref)
            access.store_misses.update(misses)
        self._record(rid, [key for key in keys if key in set(new) | set(stored)], reused=stored)

    def complete_store(self, rid: int, keys, success: bool = True) -> None:
        done = [key for key in keys if self.ref.get(key) == -1]
        for key in done:
            if success:
                self.ref[key] = 0
                self.policy.unpin(key)
            else:
                del self.ref[key]
                self.policy.remove(key)
        if success or self.contract.failed_store_event:
            self._event(STORED if success else FAILED, done)

    def finish(self, rid: int) -> None:
        access = self.access.get(rid)
        if access is None or access.generation != self.generation or access.finished or \
                not self.contract.request_hooks:
            return
        access.finished = True
        where = self.positions[rid]
        ordered = []
        for group in sorted(access.groups):
            keys = access.groups[group]
            ordered += sorted(keys, key=where.get) if all(k in where for k in keys) else keys
        if all(key in where for key in ordered):
            ordered.sort(key=where.get)
        self.policy.on_request_finished(ordered, access.inserted - access.reused,
                                        access.reused, self.ref)

    def take_events(self) -> list[tuple[str, list[Key]]]:
        taken, self.events = self.events, ([] if self.events is not None else None)
        found = []
        for kind, keys in taken or ():
            if kind == FAILED:
                keys = [key for key in keys if key not in self.ref]
            if keys:
                found.append((kind, keys))
        return found

    def reset(self) -> None:
        self.policy.clear()
        self.ref.clear()
        self.generation += 1

    # -- what a caller can read ------------------------------------------------------------
    def contents(self) -> list[tuple[Key, int]]:
        return sorted(self.ref.items())

    def stats(self) -> dict:
        """`get_stats()` in counts: chunks pinned by loads, being stored, the sizes of the
        allocations since the last call and (with a threshold) the stores it skipped."""
        found = {"pinned": sum(c > 0 for c in self.ref.values()),
                 "writing": sum(c < 0 for c in self.ref.values()),
                 "allocations": self.allocations}
        if self.offers is not None:
            found["skipped"] = self.skipped
        self.allocations, self.skipped = [], 0
        return found

    # -- bookkeeping -----------------------------------------------------------------------
    def _access(self, rid: int) -> Access:
        access = self.access.get(rid)
        if access is None or access.generation != self.generation:
            access = self.access[rid] = Access(self.generation)
        return access

    def _record(self, rid: int, keys, reused) -> None:
        if not self.contract.request_hooks:
            return  # (before vLLM 0.31 nothing records a request's accesses)
        access = self._access(rid)
        new = []
        for key in keys:
            if not access.seen(key):
                assert not access.finished, f"r{rid} offers {key} after it finished"
                access.groups.setdefault(key[1], []).append(key)
                new.append(key)
        if new:
            self.policy.on_request_access(rid, new, self.positions[rid])
        access.reused.update(key for key in reused if key not in access.inserted)

    def _event(self, kind: str, keys: list) -> None:
        if keys and self.events is not None:
            self.events.append((kind, list(keys)))
