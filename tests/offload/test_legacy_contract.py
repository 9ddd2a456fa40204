"""vLLM's CPU offloading manager before 0.31 (no vLLM needed): the older contract the oracle
follows there (oracle/offload/contract.py) on worked examples, each beside 0.33's answer (the
LRU of recency alone, nothing at a request's end, no ARC store-miss hook, the store threshold as
0.24-0.28, 0.29 and 0.30 counted it, no failed store's event); the recency LRU against a tiny
fake of 0.30's `LRUCachePolicy` on random calls, with broken fakes the comparison catches; the
contract read from a release's classes (impl/offload/release.py) and handed to the judge."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from kvfuzz.fuzz.offload.target import release_contract, with_contract
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.offload.release import contract_names
from kvfuzz.oracle.offload.contract import CURRENT, Contract, contract_of
from kvfuzz.oracle.offload.lru_recency import RecencyLRUPolicy
from kvfuzz.oracle.offload.model import FAILED, REMOVED, STORED, OffloadModel
from kvfuzz.oracle.offload.threshold import Tracker
from tests.offload.test_oracle import new, stored

LEGACY = Contract(legacy=True)


def manager(policy="lru", chunks=3, threshold=1, tracker=64_000, contract=LEGACY):
    return OffloadModel(policy, chunks, True, threshold, tracker, contract)


# -- the older contract, worked examples ------------------------------------------------------
def test_lru_before_0_31_evicts_the_least_recently_stored_not_a_request_s_tail():
    old, now = manager(chunks=2), manager(chunks=2, contract=CURRENT)
    for model in (old, now):
        a, b = stored(model, 1, (1, 2))
    c, = new(old, 2, (3,))
    new(now, 2, (3,))
    assert old.prepare_store(2, [c]) == ([c], [a])   # the oldest goes
    assert now.prepare_store(2, [c]) == ([c], [b])   # 0.33: the request's later position


def test_lru_before_0_31_moves_only_evictable_chunks_and_nothing_at_a_finish():
    model = manager(chunks=4)
    a, b, c = stored(model, 1, (1, 2, 3))
    assert model.policy.view() == {"evictable": [a, b, c]}
    model.prepare_load(1, [a])                       # pinned: off the list
    model.touch(1, [c, a, b])                        # last first; a is pinned: left alone
    assert model.policy.view() == {"evictable": [b, c]}
    model.complete_load(1, [a])                      # evictable again: the recent end
    model.finish(1)
    assert model.policy.view() == {"evictable": [b, c, a]}


def test_arc_before_0_31_learns_nothing_from_a_store_miss_and_keeps_t1_at_a_finish():
    for contract, target, t1 in ((LEGACY, 0.0, "ab"), (CURRENT, 1.0, "ba")):
        model = manager("arc", chunks=2, contract=contract)
        a, b = stored(model, 1, (1, 2))
        model.finish(1)                                    # 0.33: head to tail, last first
        assert model.policy.t1 == ([a, b] if t1 == "ab" else [b, a]), contract
        c, d = new(model, 2, (3, 4))
        oldest = model.policy.t1[0]
        assert model.prepare_store(2, [c]) == ([c], [oldest])   # to B1
        model.complete_store(2, [c])
        ghost = model.policy.b1[0]
        model.prepare_store(2, [ghost, d])                 # a store miss of a ghost
        assert model.policy.target == target, contract


def test_a_failed_store_before_0_31_publishes_nothing():
    for contract, events in ((LEGACY, []), (CURRENT, [(FAILED, [(1, 0)])])):
        model = manager(contract=contract)
        a, = new(model, 1, (1,))
        model.prepare_store(1, [a])
        model.complete_store(1, [a], success=False)
        assert model.take_events() == events


def test_the_threshold_before_0_31_counts_a_stored_key_under_it_as_skipped():
    for contract, skipped in ((LEGACY, 3), (CURRENT, 2)):
        model = manager(threshold=2, tracker=1, contract=contract)
        a, b = new(model, 1, (1, 2))
        model.prepare_store(1, [a])
        assert model.prepare_store(1, [a]) == ([a], [])    # a's second offer
        model.complete_store(1, [a])
        model.prepare_store(1, [b])                        # b pushes a out of the tracker
        model.prepare_store(1, [a])                        # a stored, counted 1 again
        assert model.stats()["skipped"] == skipped, contract


def test_the_tracker_counts_offers_keys_or_lookups_as_the_release_did():
    a, b, c = (1, 0), (2, 0), (3, 0)
    offer, key, lookup = Tracker(2, "offer"), Tracker(2, "key"), Tracker(2, "lookup")
    for tracker in (offer, key, lookup):
        tracker.offered([a, b])
        tracker.offered([a, b, c])                         # more keys than the tracker holds
        tracker.looked_up([c])
    assert dict(offer.counts) == {a: 2, b: 2}              # c left out: a and b protected
    assert dict(key.counts) == {b: 2, c: 1}                # a pushed out by its own offer
    assert dict(lookup.counts) == {c: 1}                   # offers count nothing


def test_a_release_counting_lookups_stores_a_key_looked_up_often_enough():
    # K's shrunk trace: ARC, threshold 2, two lookups of a key, then one offer
    old = manager("arc", threshold=2, contract=Contract(legacy=True, counting="lookup"))
    now = manager("arc", threshold=2, contract=CURRENT)
    for model in (old, now):
        a, = new(model, 1, (1,))
        model.looked_up(1, [a])
        model.looked_up(1, [a])
    assert old.prepare_store(1, [a]) == ([a], []) and now.prepare_store(1, [a]) == ([], [])
    assert old.lookup(1, [a]) == old.lookup(1, [a]) and dict(old.offers.counts) == {a: 2}


# -- the recency LRU against a tiny fake of vLLM 0.30's policy ------------------------------
class FakeLRU:
    """vLLM 0.30's `LRUCachePolicy` in short (`cpu/policies/lru.py`), ref counts apart."""

    def __init__(self):
        self.evictable: OrderedDict = OrderedDict()

    def mark_evictable(self, key):
        self.evictable[key] = None

    def mark_non_evictable(self, key):
        del self.evictable[key]

    def remove(self, key):
        self.evictable.pop(key, None)

    def touch(self, keys):
        for key in reversed(list(keys)):
            if key in self.evictable:
                self.evictable.move_to_end(key)

    def evict(self, n, protected):
        chosen = [key for key in self.evictable if key not in protected][:n]
        if len(chosen) < n:
            return None
        for key in chosen:
            del self.evictable[key]
        return chosen


class TouchInOrder(FakeLRU):
    def touch(self, keys):
        for key in keys:
            if key in self.evictable:
                self.evictable.move_to_end(key)


class EvictsNewest(FakeLRU):
    def evict(self, n, protected):
        chosen = [key for key in reversed(self.evictable) if key not in protected][:n]
        if len(chosen) < n:
            return None
        for key in chosen:
            del self.evictable[key]
        return chosen


class UnpinAtOldEnd(FakeLRU):
    def mark_evictable(self, key):
        self.evictable[key] = None
        self.evictable.move_to_end(key, last=False)


def first_difference(fake_cls, seed: int, steps: int = 300) -> str | None:
    """Random policy calls, as the manager makes them, on the model's recency LRU and a fake:
    the first call whose answer or order differs."""
    rng, model, fake = random.Random(seed), RecencyLRUPolicy(8), fake_cls()
    pinned: set = set()
    for step in range(steps):
        key, kind = (rng.randrange(8), 0), rng.choice(("pin", "unpin", "touch", "evict",
                                                       "remove"))
        if kind == "pin" and key in model.evictable:
            model.pin(key), fake.mark_non_evictable(key)
            pinned.add(key)
        elif kind == "unpin" and key not in model.evictable:
            model.unpin(key), fake.mark_evictable(key)
            pinned.discard(key)
        elif kind == "touch":
            keys = [(rng.randrange(8), 0) for _ in range(rng.randint(1, 4))]
            model.touch(keys, {}), fake.touch(keys)
        elif kind == "evict":
            n, protected = rng.randint(1, 3), {(rng.randrange(8), 0)}
            if model.evict(n, protected, {}) != fake.evict(n, protected):
                return f"step {step}: evict({n})"
        elif kind == "remove":
            model.remove(key), fake.remove(key)
        if list(model.evictable) != list(fake.evictable):
            return f"step {step}: {kind} -> {list(model.evictable)} vs {list(fake.evictable)}"
    return None


def test_the_recency_lru_answers_as_0_30_s_policy():
    assert [first_difference(FakeLRU, seed) for seed in range(20)] == [None] * 20


@pytest.mark.parametrize("fake", [TouchInOrder, EvictsNewest, UnpinAtOldEnd])
def test_a_broken_old_policy_differs_from_the_recency_lru(fake):
    assert any(first_difference(fake, seed) for seed in range(20)), fake.__name__


# -- the contract read from a release -----------------------------------------------------------
class Policy031:
    def on_request_finished(self, key_groups, inserted, reused, req_context): pass


class Policy033(Policy031):
    def on_request_access(self, keys, req_context): pass


class Policy030:
    def touch(self, keys, req_context): pass

    def mark_evictable(self, key): pass


class Manager024:
    """What every release from 0.24 has that 0.20-0.23 lack (`early_names`)."""

    def __init__(self, num_blocks, cache_policy="lru", enable_events=False, store_threshold=1,
                 max_tracker_size=64_000): pass

    def on_new_request(self, req_context): pass

    def on_request_finished(self, req_context): pass

    def reset_cache(self): pass

    def get_stats(self): pass


class Manager030(Manager024):
    def _record_accesses(self, keys): pass

    def lookup(self, key, req_context):
        return self._policy.get(key)


class Manager031(Manager030):
    def complete_store(self, keys, req_context, success=True):
        self.events.append(OffloadingEvent(keys=keys, removed=True))


class Manager033(Manager031):
    def complete_store(self, keys, req_context, success=True):
        self.events.append(OffloadingEvent(keys=keys, removed=True, metadata_only=True))


class Manager029(Manager030):
    _record_accesses = None

    def _record_access(self, key): pass


class Manager028(Manager024):
    def lookup(self, key, req_context):
        if self.counts is not None:
            self.counts[key] = self.counts.get(key, 0) + 1
        return self._policy.get(key)


@pytest.mark.parametrize("manager_cls, policy, names, contract", [
    (Manager033, Policy033, (), CURRENT),
    (Manager031, Policy031, ("recency_ranks", "no_failed_store_event"),
     Contract(positions=False, failed_event=False)),
    (Manager030, Policy030, ("legacy_policies",), LEGACY),
    (Manager029, Policy030, ("legacy_policies", "threshold_per_key"),
     Contract(legacy=True, counting="key")),
    (Manager028, Policy030, ("legacy_policies", "threshold_per_lookup"),
     Contract(legacy=True, counting="lookup")),
], ids=["0.33", "0.31, 0.32", "0.30", "0.29", "0.24-0.28"])
def test_the_contract_is_read_from_the_release_s_classes(manager_cls, policy, names, contract):
    assert contract_names(manager_cls, policy) == names
    entry = TARGETS["offload"].catalogue.implementations[0]     # vllm.offload.lru
    judged = with_contract(entry, manager_cls, policy)
    assert contract_of(judged.preconditions) == contract
    assert TARGETS["offload"].judge.options(judged) == {"contract": contract}


def test_a_class_of_one_s_own_keeps_what_it_declares():
    from dataclasses import replace

    from kvfuzz.impl.registry import YOURS

    entry = TARGETS["offload"].catalogue.implementations[0]
    own = replace(entry, kind=YOURS, mutates=())
    assert release_contract(own, Manager029) is own
    assert TARGETS["offload"].catalogue.preconditions_named("x", ["legacy_policies"]) == (
        with_contract(entry, Manager030, Policy030).preconditions[-1],)


def test_a_manager_of_another_interface_is_one_line():
    # vLLM 0.20: no on_new_request, on_request_finished, reset_cache, get_stats
    from kvfuzz.impl.registry import ImplementationError

    class CPUOffloadingManager:
        def lookup(self, key, req_context): pass

    entry = TARGETS["offload"].catalogue.implementations[0]
    with pytest.raises(ImplementationError, match=r"^not supported: vllm .*: CPUOffloadingManager "
                                                  r"has no on_new_request, prepare_load, touch"):
        release_contract(entry, CPUOffloadingManager)


def test_a_lookup_answer_before_0_25_is_read_by_name():
    from enum import Enum

    from kvfuzz.impl.offload.driver import answer_name

    LookupResult = Enum("LookupResult", "MISS HIT HIT_PENDING")
    assert [answer_name(a) for a in (True, None, False)] == ["HIT", "HIT_PENDING", "MISS"]
    assert answer_name(LookupResult.HIT_PENDING) == "HIT_PENDING"


# -- 0.31 and 0.32: request hooks, no positions, no failed store's event ----------------------
RANKED = Contract(positions=False, failed_event=False)


def test_0_31_s_lru_ranks_a_request_s_chunks_as_stored_not_by_position():
    then, now = manager(chunks=2, contract=RANKED), manager(chunks=2, contract=CURRENT)
    for model in (then, now):
        a, b = stored(model, 1, (1, 2))
    assert then.policy.view()["order"] == [a, b]     # stored first, least recent
    assert now.policy.view()["order"] == [b, a]      # 0.33: the later position goes first
    c, = new(then, 2, (3,))
    new(now, 2, (3,))
    assert then.prepare_store(2, [c]) == ([c], [a]) and now.prepare_store(2, [c]) == ([c], [b])
    then.finish(1)                                   # a finished request's keys: touched
    assert then.policy.view()["order"] == [c, b]     # (head to tail: the head ends last)


def test_0_31_publishes_no_failed_store_event_and_still_reorders_at_a_finish():
    for contract, events in ((RANKED, []), (CURRENT, [(FAILED, [(1, 0)])])):
        model = manager(contract=contract)
        a, = new(model, 1, (1,))
        model.prepare_store(1, [a])
        model.complete_store(1, [a], success=False)
        assert model.take_events() == events
    assert RANKED.request_hooks and not RANKED.failed_store_event
