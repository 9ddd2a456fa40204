"""vLLM's CPU offloading manager of 0.20-0.23 (no vLLM needed): what those releases lack, read
from fakes of their classes into declared names (impl/offload/release.py, `early_names`); the
oracle's contract for them (oracle/offload/contract.py): the LRU of one list moved by store and
touch (`lru_insertion.py`) against a tiny fake of 0.23's `LRUCachePolicy` on random calls, with
broken fakes the comparison catches (0.24's recency list among them); a lookup of a key being
stored that is a miss on 0.20; no request calls before 0.23; and the traces a release without a
reset or a store threshold gets (none of those ops) or refuses (outside its contract)."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from kvfuzz.fuzz.offload import target as offload_target
from kvfuzz.fuzz.offload.target import release_contract, with_contract
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.offload.release import contract_names
from kvfuzz.impl.registry import ImplementationError
from kvfuzz.oracle.offload.contract import Contract, contract_of
from kvfuzz.oracle.offload.lru_insertion import InsertionLRUPolicy
from kvfuzz.oracle.offload.model import HIT, MISS, OffloadModel
from kvfuzz.strategies.offload import generator, profile
from kvfuzz.strategies.offload.trace import New, Reset, Trace
from tests.offload.test_oracle import new, stored

ENTRY = TARGETS["offload"].catalogue.implementations[0]     # vllm.offload.lru


# -- fakes of the releases' classes (their API, nothing else) ---------------------------------
class Policy023:
    """0.20-0.23's policies: no request hooks, no mark_evictable."""

    def touch(self, keys): pass


class Manager020:
    def __init__(self, num_blocks, cache_policy="lru", enable_events=False): pass

    def lookup(self, key, req_context):
        block = self._policy.get(key)
        return block is not None and block.is_ready

    def prepare_load(self, keys, req_context): pass

    def touch(self, keys): pass

    def complete_load(self, keys): pass

    def prepare_store(self, keys, req_context): pass

    def complete_store(self, keys, success=True): pass

    def take_events(self): pass


class Manager021(Manager020):
    def touch(self, keys, req_context): pass

    def complete_load(self, keys, req_context): pass

    def complete_store(self, keys, req_context, success=True): pass

    def lookup(self, key, req_context):
        block = self._policy.get(key)
        if block is None:
            return False
        if not block.is_ready:
            return None  # write in-flight; caller should retry
        return True


class Manager022(Manager021):
    def __init__(self, num_blocks, cache_policy="lru", enable_events=False, store_threshold=1,
                 max_tracker_size=64_000): pass

    def lookup(self, key, req_context):
        if self.counts is not None:
            self.counts[key] = self.counts.get(key, 0) + 1
        return super().lookup(key, req_context)

    def reset_cache(self): pass


class Manager023(Manager022):
    def on_new_request(self, req_context): pass

    def on_request_finished(self, req_context): pass


EARLY = ("no_stats", "lru_by_insertion")


@pytest.mark.parametrize("manager_cls, names, contract", [
    (Manager023, ("legacy_policies", "threshold_per_lookup", "no_stats", "lru_by_insertion"),
     Contract(legacy=True, counting="lookup", lru_by_insertion=True, stats=False)),
    (Manager022, ("legacy_policies", "threshold_per_lookup", "no_stats", "no_request_calls",
                  "lru_by_insertion"),
     Contract(legacy=True, counting="lookup", lru_by_insertion=True, stats=False,
              request_calls=False)),
    (Manager021, ("legacy_policies", "no_stats", "no_reset", "no_request_calls", "no_threshold",
                  "lru_by_insertion"),
     Contract(legacy=True, lru_by_insertion=True, stats=False, request_calls=False)),
    (Manager020, ("legacy_policies", "no_stats", "no_reset", "no_request_calls", "no_threshold",
                  "pending_as_miss", "lru_by_insertion"),
     Contract(legacy=True, lru_by_insertion=True, stats=False, request_calls=False,
              pending_answer=False)),
], ids=["0.23", "0.22", "0.21", "0.20"])
def test_what_an_early_release_lacks_is_read_from_its_classes(manager_cls, names, contract,
                                                              monkeypatch):
    assert contract_names(manager_cls, Policy023) == names
    judged = with_contract(ENTRY, manager_cls, Policy023)
    assert contract_of(judged.preconditions) == contract
    # the released entry is driven, not one line: its missing methods are declared
    monkeypatch.setattr(offload_target, "load_attribute", lambda path: Policy023)
    assert release_contract(ENTRY, manager_cls).preconditions == judged.preconditions


def test_one_request_call_without_the_other_is_still_one_line(monkeypatch):
    class HalfHooks(Manager022):
        def on_new_request(self, req_context): pass

    monkeypatch.setattr(offload_target, "load_attribute", lambda path: Policy023)
    with pytest.raises(ImplementationError, match=r"^not supported: .*HalfHooks has no "
                                                  r"on_request_finished, get_stats$"):
        release_contract(ENTRY, HalfHooks)


# -- the contract, worked examples ------------------------------------------------------------
EARLY_CONTRACT = Contract(legacy=True, lru_by_insertion=True, stats=False, request_calls=False)


def manager(policy="lru", chunks=3, contract=EARLY_CONTRACT):
    return OffloadModel(policy, chunks, True, 1, 64_000, contract)


def test_the_lru_before_0_24_keeps_the_store_order_whatever_completes_first():
    early, later = manager(chunks=2), manager(chunks=2, contract=Contract(legacy=True))
    for model in (early, later):
        a, b = new(model, 1, (1, 2))
        model.prepare_store(1, [a])
        model.prepare_store(1, [b])
        model.complete_store(1, [b])          # b is evictable first
        model.complete_store(1, [a])
    assert early.policy.view() == {"order": [a, b]}
    assert later.policy.view() == {"evictable": [b, a]}
    c, = new(early, 2, (3,))
    new(later, 2, (3,))
    assert early.prepare_store(2, [c]) == ([c], [a])  # the first stored goes
    assert later.prepare_store(2, [c]) == ([c], [b])  # 0.24: the first evictable


def test_the_lru_before_0_24_touches_chunks_in_flight_and_skips_them_at_eviction():
    model = manager(chunks=3)
    a, b, c = stored(model, 1, (1, 2, 3))
    model.prepare_load(1, [a])
    model.touch(1, [c, a])                    # last first: a (pinned) moves too, c ends last
    assert model.policy.view() == {"order": [b, a, c]}
    model.complete_load(1, [a])               # a completed load moves nothing
    assert model.policy.view() == {"order": [b, a, c]}
    model.prepare_load(1, [b])
    d, = new(model, 2, (4,))
    assert model.prepare_store(2, [d]) == ([d], [a])  # b is being read: a is the first free


def test_0_20_answers_a_key_being_stored_as_a_miss_and_no_request_call_answers():
    for pending_answer, expected in ((True, "HIT_PENDING"), (False, MISS)):
        model = manager(contract=Contract(legacy=True, lru_by_insertion=True,
                                          request_calls=False, pending_answer=pending_answer))
        assert model.new_request(1, [(1, 0)], [16]) is None
        model.prepare_store(1, [(1, 0)])
        assert model.lookup(1, [(1, 0)]) == [expected]
        model.complete_store(1, [(1, 0)])
        assert model.lookup(1, [(1, 0)]) == [HIT]
    assert manager(contract=Contract(legacy=True)).new_request(1, [], None) == "chunk_level"


# -- the LRU against a tiny fake of vLLM 0.23's policy ----------------------------------------
class FakeLRU:
    """vLLM 0.23's `LRUCachePolicy` in short (`cpu/policies/lru.py`), ref counts handed in."""

    def __init__(self):
        self.blocks: OrderedDict = OrderedDict()

    def insert(self, key):
        self.blocks[key] = None

    def remove(self, key):
        del self.blocks[key]

    def touch(self, keys):
        for key in reversed(list(keys)):
            if key in self.blocks:
                self.blocks.move_to_end(key)

    def completed(self, key):
        pass  # the manager tells the policy nothing

    def evict(self, n, protected, ref):
        chosen = [key for key in self.blocks if ref[key] == 0 and key not in protected][:n]
        if len(chosen) < n:
            return None
        for key in chosen:
            del self.blocks[key]
        return chosen


class TouchInOrder(FakeLRU):
    def touch(self, keys):
        for key in keys:
            if key in self.blocks:
                self.blocks.move_to_end(key)


class EvictsInFlight(FakeLRU):
    def evict(self, n, protected, ref):
        return super().evict(n, protected, {key: 0 for key in ref})


class CompletionMovesToEnd(FakeLRU):
    """0.24's recency: a chunk becoming evictable goes to the recent end."""

    def completed(self, key):
        self.blocks.move_to_end(key)


def first_difference(fake_cls, seed: int, steps: int = 300) -> str | None:
    """Random policy calls, as the manager makes them, on the model's LRU and a fake: the first
    call whose answer or order differs."""
    rng, model, fake = random.Random(seed), InsertionLRUPolicy(8), fake_cls()
    ref: dict = {}
    for step in range(steps):
        key, kind = (rng.randrange(8), 0), rng.choice(("insert", "complete", "touch", "evict",
                                                       "remove", "pin"))
        if kind == "insert" and key not in ref:
            ref[key] = -1
            model.insert(key, 1, {}), fake.insert(key)
        elif kind == "complete" and ref.get(key, 0) != 0:   # a store or a last load
            ref[key] = 0 if ref[key] in (-1, 1) else ref[key] - 1
            model.unpin(key), fake.completed(key)
        elif kind == "pin" and ref.get(key, -1) >= 0:
            ref[key] += 1
            model.pin(key)
        elif kind == "touch":
            keys = [(rng.randrange(8), 0) for _ in range(rng.randint(1, 4))]
            model.touch(keys, ref), fake.touch(keys)
        elif kind == "evict":
            n, protected = rng.randint(1, 3), {(rng.randrange(8), 0)}
            chosen = model.evict(n, protected, ref)
            if chosen != fake.evict(n, protected, ref):
                return f"step {step}: evict({n})"
            for gone in chosen or ():
                del ref[gone]
        elif kind == "remove" and ref.get(key) == -1:       # a failed store
            del ref[key]
            model.remove(key), fake.remove(key)
        if model.view()["order"] != list(fake.blocks):
            return f"step {step}: {kind} -> {model.view()['order']} vs {list(fake.blocks)}"
    return None


def test_the_insertion_lru_answers_as_0_23_s_policy():
    assert [first_difference(FakeLRU, seed) for seed in range(20)] == [None] * 20


@pytest.mark.parametrize("fake", [TouchInOrder, EvictsInFlight, CompletionMovesToEnd])
def test_a_broken_early_policy_differs_from_the_insertion_lru(fake):
    assert any(first_difference(fake, seed) for seed in range(20)), fake.__name__


# -- what traces a release without a reset or a threshold gets --------------------------------
def test_a_release_without_reset_or_threshold_gets_neither_and_refuses_both():
    declared = frozenset(ENTRY.preconditions + (profile.NO_RESET, profile.NO_THRESHOLD))
    stream = generator.generator_for(declared)
    assert stream.name == "offload/2[lru only, events drained, no reset, no threshold]"
    traces = [stream.generate(0, index) for index in range(12)]
    assert all(trace.store_threshold == 1 for trace in traces)
    assert not any(isinstance(op, Reset) for trace in traces for op in trace.ops)
    assert any(isinstance(op, Reset) for index in range(12) for op in
               generator.generator_for(frozenset(ENTRY.preconditions)).generate(0, index).ops)
    reset = Trace("lru", 2, 1, True, 2, 4, (New(1, (1,)), Reset()))
    assert profile.broken(reset, declared) == [profile.NO_RESET, profile.NO_THRESHOLD]
    assert profile.broken(reset, frozenset(ENTRY.preconditions)) == []


# -- the driver's side: the API read from the classes (no vLLM) -------------------------------
def test_an_early_manager_is_built_and_called_as_its_signatures_say():
    from dataclasses import dataclass
    from types import SimpleNamespace

    from kvfuzz.impl.offload.driver import OffloadDriver, offload_key
    from kvfuzz.impl.offload.release_api import (constructor_keywords, request_context,
                                                 takes_context)

    assert constructor_keywords(Manager020, 4, "lru", True, 1, 64_000) == {
        "num_blocks": 4, "cache_policy": "lru", "enable_events": True}
    assert set(constructor_keywords(Manager022, 4, "arc", False, 2, 8)) == {
        "num_blocks", "cache_policy", "enable_events", "store_threshold", "max_tracker_size"}
    assert not takes_context(Manager020.touch) and takes_context(Manager021.touch)

    @dataclass
    class Context020:
        kv_transfer_params: dict | None = None

    @dataclass
    class Context022:
        req_id: str
        kv_transfer_params: dict | None = None

    assert request_context(SimpleNamespace(ReqContext=Context020), "r1") == Context020()
    assert request_context(SimpleNamespace(ReqContext=Context022), "r1").req_id == "r1"
    # 0.20-0.23's LRU: every block in one ordered dict, read in its order; no evictable count
    blocks = OrderedDict((offload_key(k), SimpleNamespace(ref_cnt=0, block_id=i))
                         for i, k in enumerate([(2, 0), (1, 0)]))
    driver = object.__new__(OffloadDriver)
    driver.manager, driver.plain, driver.unit = SimpleNamespace(
        _policy=SimpleNamespace(blocks=blocks), _get_num_free_blocks=lambda: 3), {}, "block"
    assert driver.policy_view() == {"order": [2, 0, 1, 0]}
    assert driver.sizes() == {"free": 3, "evictable": None, "writing": 0}
    assert driver.stats() == {"pinned": -1, "writing": -1, "allocations": None, "used": -1}
