"""The released vLLM `KVCacheManager` (vllm 0.33.0) through the lock step (its seeded traces, each
profile's alike, and the edge classes each stream's traces reach: `test_every_profile.py`): the
corpus replays clean on it, the oracle's hand-made cases hold on it too, and
an outside class of the wrong shape is refused in one line before anything runs. Skips without
vLLM."""

import functools

import pytest

from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.strategies.kvmanager.trace import Arrive, Decode, Finish, Preempt, Schedule, Trace
from kvfuzz.impl.registry import load_attribute
from tests.helpers import (assert_corpus_replays_clean, assert_refused_in_one_line,
                           divergence, double, needs_engine)

pytestmark = needs_engine("vllm")
VLLM = KVMANAGER.catalogue.resolve("vllm.kvmanager")


def not_a_class(kv_cache_config, max_model_len):
    """A function where the target calls a class."""


class MissingMethods:
    """A manager that cannot allocate."""

    def __init__(self, *args, **kwargs):
        pass

    def get_computed_blocks(self, request):
        return None


@pytest.mark.parametrize("trace", [
    # Shared prefixes, a tight pool, preemption and re-admission through the cache.
    Trace(6, 2, 0, 100, (Arrive(1, (1, 2, 3, 4, 5)), Schedule(1, 99), Finish(1),
                         Arrive(2, (1, 2, 3, 4, 5, 6, 7)), Schedule(2, 99),
                         Arrive(3, (1, 2, 3, 4, 5)), Schedule(3, 99), Preempt(3),
                         Schedule(3, 2), Schedule(3, 99), Decode(3, 9), Decode(3, 9))),
    # Both groups: decode steps move the window; the last token reaches max_model_len.
    Trace(20, 2, 3, 12, (Arrive(1, tuple(range(1, 8))), Schedule(1, 3), Schedule(1, 99),
                         *(Decode(1, 5) for _ in range(6)), Arrive(2, tuple(range(1, 8))),
                         Schedule(2, 99))),
], ids=["full-attention", "sliding-window"])
def test_hand_made_lifecycles_agree(trace):
    outcome = KVMANAGER.check(trace, VLLM)
    assert outcome.status == AGREE, outcome.divergence and outcome.divergence.report()
    assert outcome.features["allocate_slots ok"] >= 4


def test_the_corpus_replays_clean_on_vllm():
    assert assert_corpus_replays_clean("kvmanager", VLLM) >= 3


@pytest.mark.parametrize("attr, shows", [
    ("not_a_class", "is a function, not a class"),
    ("MissingMethods", "has no method allocate_slots, free"),
])
def test_an_outside_class_of_the_wrong_shape_is_one_line(attr, shows):
    assert_refused_in_one_line("kvmanager", f"{__name__}:{attr}", shows,
                               "vLLM KVCacheManager's interface")


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, built on first use (never at collection)."""
    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class TablesReversed(KVCacheManager):
        """Allocates correctly but reports a request's block table back to front: the one
        fault only the table check sees (no source mutant reaches it)."""

        def get_block_ids(self, request_id):
            return tuple(ids[::-1] for ids in super().get_block_ids(request_id))
    class TablesDropped(KVCacheManager):
        """A correct manager that, in its own process, patches kvfuzz's driver so that the one
        read of every request's tables (`ManagerReads.block_tables`, answered as what changed)
        leaves out the last request's: the judge holds the count of requests it asked for."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            from kvfuzz.impl.kvmanager import driver

            def block_tables(reads, since, rids):
                return reads.changed("block_tables", since, {
                    "tables": [reads.block_ids(rid) for rid in list(rids)[:-1]]})
            driver.ManagerReads.block_tables = block_tables

    class TablesNotAList(TablesDropped):
        """The same read answered as a part that is not a list of tables."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            from kvfuzz.impl.kvmanager import driver

            driver.ManagerReads.block_tables = lambda reads, since, rids: reads.changed(
                "block_tables", since, {"tables": 7})
    return {"TablesReversed": TablesReversed, "TablesDropped": TablesDropped,
            "TablesNotAList": TablesNotAList}


def __getattr__(name):  # the double by import path: tests.kvmanager.test_upstream:TablesReversed
    if name in ("TablesReversed", "TablesDropped", "TablesNotAList"):
        return doubles()[name]
    raise AttributeError(name)


def test_a_wrong_block_table_is_caught():
    trace = Trace(10, 2, 0, 100, (Arrive(1, (1, 2, 3, 4, 5)), Schedule(1, 99)))
    found = divergence("kvmanager", trace, f"{__name__}:TablesReversed")
    assert found is not None and found.what.startswith("block table"), found and found.report()
    assert KVMANAGER.check(trace, VLLM).status == AGREE


@pytest.mark.slow
def test_the_tables_read_as_changes_are_judged_across_processes():
    """In a worker, the tables and the pool cross as what changed since the op before
    (`Lockstep.read_changed`): a wrong table is still caught there, and so is a tables read
    that leaves a request out or is not a list, patched into kvfuzz's driver in the
    implementation's own process (the judge's process is never touched)."""
    from kvfuzz.fuzz.engine.isolation import Checker

    trace = Trace(10, 2, 0, 100, (Arrive(1, (1, 2, 3, 4, 5)), Schedule(1, 99),
                                  Arrive(2, (6, 7, 8)), Schedule(2, 99), Decode(1, 9)))
    checker = Checker()
    try:
        for name, shows in (("TablesReversed", "r1: expected [[1, 2, 3]]"),
                            ("TablesDropped", "r1: expected [[]], actual None"),
                            ("TablesNotAList", "block_tables answered 7, not a list")):
            outcome = checker.check(KVMANAGER, trace, double("kvmanager", f"{__name__}:{name}"))
            found = outcome.divergence
            assert found is not None and found.what.startswith("block table"), \
                (name, found and found.report())
            assert shows in found.report(), (name, found.report())
        assert checker.check(KVMANAGER, trace, VLLM).status == AGREE
    finally:
        checker.close()


def test_scheduler_shaped_traces_agree_and_look_like_the_recorded_session():
    """The generator's scheduler-shaped quarter (strategies/kvmanager/scheduler_shape.py) runs
    clean on the released class, preempts, samples and hits the cache, and has the recorded
    vLLM session's mix of decode steps (corpus/kvmanager-ebf8ecc276af2472.json)."""
    import random
    from collections import Counter

    from kvfuzz.fuzz.engine import corpus
    from kvfuzz.strategies.kvmanager import scheduler_shape
    from tests.conftest import CORPUS

    events, decodes, ops = Counter(), 0, 0
    for index in range(30):
        trace = scheduler_shape.build(random.Random(index), 200)
        outcome = KVMANAGER.check(trace, VLLM)
        assert outcome.status == AGREE, outcome.divergence and outcome.divergence.report()
        events.update(outcome.features)
        decodes += sum(isinstance(op, Decode) for op in trace.ops)
        ops += len(trace.ops)
    for event in ("preempt", "sample, no slot", "admission with a hit", "prefill chunk",
                  "decode into a new block"):
        assert events[event] > 0, (event, events)
    _, recorded = corpus.load(CORPUS / "kvmanager-ebf8ecc276af2472.json")
    recorded_share = sum(isinstance(op, Decode) for op in recorded.ops) / len(recorded.ops)
    assert abs(decodes / ops - recorded_share) < 0.15, (decodes / ops, recorded_share)
