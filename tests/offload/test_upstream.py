"""The released vLLM CPU offloading manager (vllm 0.33.0) through the lock step, with each policy:
2,000 seeded traces run to their last op (the first 500 reach every edge class), hand-made
lifecycles (the oracle's worked examples) agree, the corpus replays clean, events left pending
at a reset are reported when undeclared, checks no source mutant reaches catch their fault, and
an outside class of the wrong shape is refused in one line. Skips without vLLM."""

import functools
from collections import Counter

import pytest

from kvfuzz.fuzz.engine.target import AGREE, OUTSIDE_CONTRACT
from kvfuzz.fuzz.offload.target import OFFLOAD
from kvfuzz.impl.offload import RELEASED
from kvfuzz.impl.registry import load_attribute
from kvfuzz.strategies.offload.trace import (CompleteLoad, CompleteStore, Events, Finish, Load,
                                             New, Reset, Store, Touch, Trace)
from tests.bars import bar
from tests.helpers import (assert_corpus_replays_clean, assert_wrong_shape_is_one_line,
                           divergence, fail_with, needs_engine, undeclared)

pytestmark = needs_engine("vllm")
LRU, ARC = (OFFLOAD.catalogue.resolve(f"vllm.offload.{p}") for p in ("lru", "arc"))


# 2,000 seeded traces of each policy (issue 24), spread by pytest -n; CI runs the first quarter
# (`tests/bars.py`), a nightly run all of it
SHARDS, SHARD = bar(4), 500


@pytest.mark.parametrize("impl, shard", [(impl, shard) for impl in (LRU, ARC)
                                         for shard in range(SHARDS)],
                         ids=[f"{name}-{shard}" for name in ("lru", "arc")
                              for shard in range(SHARDS)])
def test_every_seeded_trace_runs_to_its_last_op_and_they_reach_every_edge_class(impl, shard):
    events = Counter()
    for index in range(shard * SHARD, (shard + 1) * SHARD):
        outcome = OFFLOAD.check(OFFLOAD.generator.generate(0, index, [impl]), impl)
        if outcome.status != AGREE:
            fail_with(outcome.divergence)
        events.update(outcome.features)
    if shard:  # the first shard reaches every edge class; the others run to the last op
        return
    other = "LRU" if impl is ARC else "ARC"  # the other policy's own edge classes
    declared = {e for e in OFFLOAD.judge.lockstep.EVENTS if not e.startswith(other)}
    assert declared <= set(events), sorted(declared - set(events))


def test_the_import_path_of_the_released_class_is_its_lru_entry():
    assert OFFLOAD.catalogue.resolve(RELEASED) is LRU


LIFECYCLES = {  # the oracle's worked examples (test_oracle.py, test_policies.py) as traces
    "lru: tails first, a touch, recency while pinned": ("lru", 3, (
        New(1, (1, 2, 3)), Store(1, 0, 3), CompleteStore(1), Touch(1, 1, 3), Load(1, 2, 3),
        Touch(1, 2, 3), New(2, (4,)), Store(2, 0, 1), CompleteLoad(1), Finish(1), Events())),
    "arc: reuse to T2, ghosts, the target": ("arc", 2, (
        New(1, (1, 2)), Store(1, 0, 2), CompleteStore(1), Finish(1), New(2, (3,)),
        Store(2, 0, 1), New(3, (1,)), CompleteStore(2), Store(3, 0, 1), Load(2, 0, 1),
        CompleteLoad(2), Finish(2), Events())),
    "a failed store, retried, and a reset": ("arc", 2, (
        New(1, (1, 2)), Store(1, 0, 2), CompleteStore(1, False), New(2, (1,)), Store(2, 0, 1),
        Events(), CompleteStore(2), Events(), Reset(), Load(2, 0, 1), Store(2, 0, 1))),
}


@pytest.mark.parametrize("name", sorted(LIFECYCLES))
def test_hand_made_lifecycles_agree(name):
    policy, chunks, ops = LIFECYCLES[name]
    trace = Trace(policy, chunks, 1, True, 1, 64, ops)
    outcome = OFFLOAD.check(trace, LRU if policy == "lru" else ARC)
    assert outcome.status == AGREE, outcome.divergence and outcome.divergence.report()


def test_the_corpus_replays_clean():
    assert assert_corpus_replays_clean("offload", LRU, outside_allowed=True) + \
        assert_corpus_replays_clean("offload", ARC, outside_allowed=True) >= 3


def __getattr__(name):  # by import path: tests.offload.test_upstream:Undeclared, the doubles
    if name == "Undeclared":
        return undeclared(RELEASED)
    if name in ("LoadsTheNextChunk", "UsageCountsStored"):
        return doubles()[name]
    raise AttributeError(name)


def test_events_left_pending_at_a_reset_are_reported_when_undeclared():
    """vLLM's scheduler drains the events every step, and a reset comes between steps; a caller
    that resets with a stored event not taken yet is told of a chunk the reset removed."""
    trace = Trace("lru", 4, 1, True, 1, 64, (New(1, (1,)), Store(1, 0, 1), CompleteStore(1),
                                             Reset(), Events()))
    assert OFFLOAD.check(trace, LRU).status == OUTSIDE_CONTRACT
    found = divergence("offload", trace, OFFLOAD.catalogue.resolve(f"{__name__}:Undeclared"))
    assert found is not None and found.what == "events vs contents at op 4 of 5: events", \
        found and found.report()
    assert "1 announced stored are not stored: [(1, 0)]" in found.report()


# Faults no source mutant makes, for the checks only they can fail: a load told to read another
# chunk than its store wrote, usage that counts stored chunks as in use. Subclasses of the
# released class, built on first use (never at collection).
@functools.cache
def doubles() -> dict:
    manager = load_attribute(RELEASED)

    class LoadsTheNextChunk(manager):
        def prepare_load(self, keys, req_context):
            spec = super().prepare_load(keys, req_context)
            spec.block_ids = spec.block_ids + 1
            return spec

    class UsageCountsStored(manager):
        def get_stats(self):
            evictable, self._num_evictable_cache_chunks = self._num_evictable_cache_chunks, 0
            try:
                return super().get_stats()
            finally:
                self._num_evictable_cache_chunks = evictable
    return {cls.__name__: cls for cls in (LoadsTheNextChunk, UsageCountsStored)}


@pytest.mark.parametrize("attr, label, shows", [
    ("LoadsTheNextChunk", "chunk", "the load of (1, 0) reads chunk 1; its store wrote chunk 0"),
    ("UsageCountsStored", "usage", "pinned: expected 0, actual 2"),
])
def test_checks_no_mutant_reaches_catch_their_fault(attr, label, shows):
    trace = Trace("lru", 4, 1, True, 1, 64, (New(1, (1, 2)), Store(1, 0, 2), CompleteStore(1),
                                             Load(1, 0, 1), CompleteLoad(1)))
    found = divergence("offload", trace, f"{__name__}:{attr}")
    assert found is not None and found.what.startswith(label), found and found.report()
    assert shows in found.report(), found.report()
    assert OFFLOAD.check(trace, LRU).status == AGREE


def not_a_class(num_chunks, cache_policy, enable_events, store_threshold, max_tracker_size):
    """A function where the target calls a class."""


class MissingMethods:
    """A manager that cannot load."""

    def __init__(self, num_chunks, cache_policy="lru", enable_events=False, store_threshold=1,
                 max_tracker_size=64_000):
        pass

    def lookup(self, key, req_context):
        return None


class WrongConstructor:
    """The block pool's shape: num_gpu_blocks, not num_chunks."""

    def __init__(self, num_gpu_blocks, enable_caching, hash_block_size):
        pass


for _name in ("on_new_request", "lookup", "prepare_load", "touch", "complete_load",
              "prepare_store", "complete_store", "on_request_finished", "take_events",
              "reset_cache", "get_stats"):
    setattr(WrongConstructor, _name, lambda self, *args: None)


@pytest.mark.parametrize("attr, shows", [
    ("not_a_class", "is a function, not a class"),
    ("MissingMethods", "has no method on_new_request, prepare_load"),
    ("WrongConstructor", "cannot be called with 0 positional arguments and num_chunks, "
                         "cache_policy"),
])
def test_an_outside_class_of_the_wrong_shape_is_one_line(attr, shows):
    assert_wrong_shape_is_one_line("offload", f"{__name__}:{attr}", shows,
                                   "vLLM CPUOffloadingManager's interface")
