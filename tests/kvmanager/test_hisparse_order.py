"""The order among one op's frees at either end of HiSparse's free queues
(`fuzz/kvmanager/hisparse_order.py`), on plain data: each block where the last call that dropped
a reference put it, later batches first at the head, earlier first at the tail; a broken order
caught; a block no call names left unjudged; a running request's partial tail's copy placed.
`slow`: an import's hold, decided, and its frees judged on the trace that found it uncertain;
the double releasing the device copies reversed caught where the host ids were taken for
device blocks.
The catalogue mutant only this check catches, `hisparse_free_unpins_head_first`, is
`test_mutants.py`'s (ALONE). No vllm needed but for the `slow` ones."""

import functools

import pytest

from kvfuzz.fuzz.kvmanager.hisparse_order import (FREE, ORDERED, UNPIN, FreeOrder,
                                                  expected_frees)
from kvfuzz.fuzz.kvmanager.hisparse_queue import UNORDERED
from tests.helpers import divergence, needs_engine
from tests.kvmanager.hisparse_doubles import broken_manager

CACHED = {1, 3}


def _expected(calls, freed):
    return expected_frees(calls, freed, lambda block: block in CACHED)


def test_a_finish_unpins_then_frees_each_group_last_block_first():
    # (`HiSparseCoordinator.free`'s unpins, then the indexer's table, the resident row left,
    # the hot region: each `free_blocks` call's uncached batch prepended, cached appended)
    calls = [([7, 2], UNPIN), ([6, 3, 1], FREE), ([8], FREE), ([9, 5], FREE)]
    head, tail = _expected(calls, {1, 2, 3, 5, 6, 7, 8, 9})
    assert head == [9, 5, 8, 6]
    assert tail == [7, 2, 3, 1]


def test_a_block_goes_where_its_last_reference_went():
    # a resident page's write-back pin dropped (no reference left yet), then unpinned: tail
    calls = [([4], FREE), ([4], UNPIN), ([2], FREE)]
    assert _expected(calls, {2, 4}) == ([2], [4])


def test_a_block_no_call_names_is_not_judged():
    assert _expected([([2], FREE)], {2, 4}) is None


class _Judge(FreeOrder):
    def __init__(self, calls):
        self.counted, self.events, self.order_copies, self.order_unsure = [], {}, 0, False
        self.order_calls = {"host": calls, "device": []}

    def count(self, name, times=1):
        self.counted.append(name)


def _judged(actual, head, tail, calls):
    keys = [("h", b) if b in CACHED else None for b in range(10)]
    judge = _Judge(calls)
    return judge.free_order_problems("host", actual, head, tail, keys), judge.counted


def test_the_queue_after_the_op_in_the_calls_order_agrees():
    calls = [([6, 3, 2], FREE), ([9, 5], FREE)]
    assert _judged([9, 5, 6, 2, 8, 3], [9, 5, 6, 2], [3], calls) == ([], [ORDERED])


def test_each_broken_order_is_caught():
    calls = [([6, 3, 2], FREE), ([9, 5], FREE), ([1], FREE)]
    for actual in ([6, 2, 9, 5, 8, 3, 1],  # the later call's batch behind the earlier's
                   [5, 9, 6, 2, 8, 3, 1],  # a batch in the order opposite to the one given
                   [9, 5, 6, 2, 8, 1, 3]):  # the tail's batches swapped
        freed = [b for b in actual if b != 8]
        problems, _ = _judged(actual, freed[:4], freed[4:], calls)
        assert problems and problems[0][0] == "free queue", actual


def test_between_the_ends_with_nothing_left_of_the_queue_before():
    # (the split between the head and the tail is not the queue check's to make here: an
    # unpinned page appended to an empty queue, then an uncached free prepended)
    calls = [([7, 2], UNPIN), ([6], FREE)]
    assert _judged([6, 7, 2], [6, 7, 2], [], calls)[0] == []
    assert _judged([7, 6, 2], [7, 6, 2], [], calls)[0]


def test_an_op_with_a_free_no_call_names_counts_as_unordered():
    assert _judged([9, 5, 8], [9, 5], [], [([9], FREE)]) == ([], [UNORDERED])



def test_a_running_requests_partial_tail_copy_goes_back_with_the_release():
    # (shaped after "hisparse cow" index 93, op 96: the step's unpins, the release at the
    # step's end, a report's frees; the copy 32 is in no table, `hisparse_queue.py`'s extra
    # pop: without it the op was "order not predicted" before 2026-12-07)
    judge = _Judge([])
    judge.order_calls["device"] = [([21, 12, 11], UNPIN), ([11], FREE), ([11], UNPIN)]
    judge.events = {"device copy-on-write copies taken": 1}
    judge.order_mark, judge.order_sources, judge.queue_copy = 1, [], 32
    keys = [("h", b) for b in range(40)]
    assert judge.free_order_problems("device", [7, 32, 11], [], [32, 11], keys) == []
    assert judge.free_order_problems("device", [7, 11, 32], [], [11, 32], keys)
    judge.queue_copy = None
    assert judge.free_order_problems("device", [7, 32, 11], [], [32, 11], keys) == []
    assert judge.counted == [ORDERED, ORDERED, UNORDERED]  # (the broken one judged too)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)


@_ENGINE[0]
@_ENGINE[1]
def test_an_imports_hold_is_decided_and_its_frees_ordered(monkeypatch):
    """On "hisparse import" index 262, r2's failed import (its pages past the hit never ready,
    so its publication pending) is finished with a write-back in flight: the release holds its
    pages and frees them, reversed, once the write-back completes, in the report after op 153.
    Until 2026-12-08 that hold was "not certain" and the op's host order not judged (a false
    "free queue" there before the exemption); the publication model now decides it
    (`finish_holds`), so the double freeing the held pages first page first is caught at op
    153, where the old rule (no decision: `finish_holds` never filled) let the trace cut after
    that op agree."""
    from dataclasses import replace

    from kvfuzz.fuzz.kvmanager import hisparse_lag
    from kvfuzz.strategies.kvmanager import streams

    trace = streams.ALONE["hisparse import"].generate(0, 262)
    cut = replace(trace, ops=trace.ops[:154])
    broken = "tests.kvmanager.test_hisparse_import:HeldPagesFreedForward"
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", cut, broken)
    assert found is not None and found.what.startswith("free queue at op 153 "), found

    class Undecided(dict):
        def __setitem__(self, rid, blocks):
            pass
    start = hisparse_lag.LaggedReports.start_reports

    def old_rule(self):
        start(self)
        self.finish_holds = Undecided()
    monkeypatch.setattr(hisparse_lag.LaggedReports, "start_reports", old_rule)
    assert divergence("kvmanager", cut, broken) is None


@_ENGINE[0]
@_ENGINE[1]
def test_an_admissions_released_hit_block_named_by_its_host_id_is_ordered(monkeypatch):
    """On "hisparse cow" index 4, op 42 (r3's admission, a partial hit), the release frees the
    indexer's hit block 9 and the Mamba group's 13 at the step's end (`_free_cow_retained_blocks`
    in manager order), both to the tail; r3's host table holds host block 13, which the judge
    took for the device block until 2026-12-07 (`FreeOrder.device_held`), so no call named 13
    and the op was "order not predicted". The double releasing the copies reversed is caught
    there now; the old rule let the trace cut after that op agree."""
    from dataclasses import replace

    from kvfuzz.strategies.kvmanager import hisparse_cow

    broken = f"{__name__}:CowReleaseReversed"
    trace = hisparse_cow.GENERATOR.generate(0, 4)
    cut = replace(trace, ops=trace.ops[:43])
    assert divergence("kvmanager", cut, "vllm.kvmanager") is None
    found = divergence("kvmanager", cut, broken)
    assert found is not None and found.what.startswith("free queue at op 42 "), found
    assert "13 at position 32 where 9 was due" in found.report(), found.report()
    monkeypatch.setattr(FreeOrder, "device_held",
                        staticmethod(lambda tables: {b for table in tables for b in table}))
    assert divergence("kvmanager", cut, broken) is None


@functools.cache
def doubles() -> dict:
    """A subclass of the released class that releases the device copy-on-write copies' blocks
    in the reverse order (`_free_cow_retained_blocks` given `take_kv_cache_block_copies`'s
    list reversed). Built on first use."""
    Broken = broken_manager()

    class CowReleaseReversed(Broken):
        @staticmethod
        def break_(coordinator):
            pass

        def take_kv_cache_block_copies(self):
            copies, retained = super().take_kv_cache_block_copies()
            return copies, retained[::-1]

    return {"CowReleaseReversed": CowReleaseReversed}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_hisparse_order:...
    if name == "CowReleaseReversed":
        return doubles()[name]
    raise AttributeError(name)
