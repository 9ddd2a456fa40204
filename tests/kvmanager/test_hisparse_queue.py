"""HiSparse's two free queues judged (`fuzz/kvmanager/hisparse_queue.py`): which blocks each
group's allocation takes from the head, and the queue after the op's unordered frees (uncached
ones at the head, the queue before them in its order, cached or unpinned ones at the tail).
The rule on plain data, each broken queue caught; doubles of the released pools break one side
each, caught at the "hisparse cow" stream's index pinned here (the release agrees there); the
catalogue mutant `hisparse_unpinned_reused_first` is `test_mutants.py`'s (ALONE). The device
cache map on the plain HiSparse profiles too (since 2026-12-07): a double caught there, an
import's cached count. Skips the doubles without vLLM."""

import functools

import pytest

from kvfuzz.fuzz.kvmanager.hisparse_queue import REQUEUED, PoolQueues
from kvfuzz.oracle.kvmanager.align_queue import QueueModel
from kvfuzz.strategies.kvmanager import hisparse_cow
from tests.helpers import divergence, needs_engine
from tests.kvmanager.hisparse_doubles import broken_manager


class _Judge(PoolQueues):
    def __init__(self):
        self.counted = []

    def count(self, name, times=1):
        self.counted.append(name)


def _after(actual, keys, middle=(5, 6, 7), resident=(), pinned=(), prev_keys=None, ref=None):
    """`_queue_after` of the device pool: the queue after the allocation `middle`, the read
    `actual`; blocks 1-9, `keys` the cached ones after the op."""
    keys = [("h", b) if b in keys else None for b in range(10)]
    prev_keys = list(keys) if prev_keys is None else prev_keys
    model = QueueModel(list(middle), [0] * 10, lambda block: False)
    pool = {"queue": list(actual), "keys": keys, "ref": ref or [0] * 10}
    judge = _Judge()
    return judge._queue_after("device", model, pool, prev_keys, set(resident),
                              set(pinned)), judge.counted


def test_frees_go_uncached_to_the_head_cached_and_unpinned_to_the_tail():
    assert _after([2, 1, 5, 6, 7, 3, 4], keys={3}, resident={4}, pinned={4})[0] == []
    assert _after([5, 6, 7, 4], keys=(), resident={4})[0] == []  # a freed request's: either
    assert _after([4, 5, 6, 7], keys=(), resident={4})[0] == []


def test_a_free_block_touched_and_freed_again_moves_to_the_tail_only():
    problems, counted = _after([5, 7, 6], keys={6})
    assert problems == [] and counted == [REQUEUED]
    assert _after([6, 5, 7], keys={6})[0]  # (a cached block is appended, never prepended)


@pytest.mark.parametrize("actual, keys, pinned, words", [
    ([5, 6, 7, 2], (), (), "on the tail's side [2]"),  # an uncached free appended
    ([3, 5, 6, 7], {3}, (), "3 at position 0 where 5 was due"),  # a cached one prepended
    ([4, 5, 6, 7], (), {4}, "4 at position 0 where 5 was due"),  # an unpinned page prepended
    ([6, 5, 7], (), (), "6 at position 0 where 5 was due"),  # the middle reordered
])
def test_each_broken_queue_is_caught(actual, keys, pinned, words):
    problems, _ = _after(actual, keys=keys, resident=pinned, pinned=pinned)
    assert problems and problems[0][0] == "free queue" and words in problems[0][1], problems


def test_a_block_that_left_the_queue_must_be_held():
    assert "held by nothing" in _after([5, 7], keys=())[0][0][1]
    assert _after([5, 7], keys=(), ref=[0] * 6 + [1] + [0] * 3)[0] == []  # 6 adopted


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class whose HiSparse pools break one queue rule each (the
    coordinator built in the constructor, `hisparse_doubles.py`). Built on first use."""
    Broken = broken_manager()

    class HostPopsReversed(Broken):  # the host pool hands a request's new blocks out reversed
        @staticmethod
        def break_(coordinator):
            pool = coordinator.host_manager.block_pool
            take = pool.get_new_blocks
            pool.get_new_blocks = lambda count: take(count)[::-1]

    class UncachedFreesAppended(Broken):  # the device pool appends uncached frees (no LIFO)
        @staticmethod
        def break_(coordinator):
            queue = coordinator.gpu_pool.free_block_queue
            queue.prepend_n = queue.append_n

    class IndexerCachesOneShort(Broken):  # the indexer's batch of full blocks cached but its last
        @staticmethod
        def break_(coordinator):
            pool = coordinator.gpu_pool
            cache = pool.cache_full_blocks

            def short(request, blocks, num_cached_blocks, num_full_blocks, *args, **kwargs):
                group = kwargs.get("kv_cache_group_id", args[1] if len(args) > 1 else None)
                if group == 1 and num_full_blocks - num_cached_blocks >= 2:
                    num_full_blocks -= 1
                cache(request, blocks, num_cached_blocks, num_full_blocks, *args, **kwargs)
            pool.cache_full_blocks = short

    class CopyKeepsNoEntries(Broken):  # a Mamba copy-on-write's entries left on its source
        @staticmethod
        def break_(coordinator):
            coordinator.gpu_pool.move_block_hashes = lambda source, copy: None

    return {cls.__name__: cls for cls in (HostPopsReversed, UncachedFreesAppended,
                                          IndexerCachesOneShort, CopyKeepsNoEntries)}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_hisparse_queue:...
    if name in ("HostPopsReversed", "UncachedFreesAppended", "IndexerCachesOneShort",
                "CopyKeepsNoEntries"):
        return doubles()[name]
    raise AttributeError(name)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)

# (double, the first index of the "hisparse cow" stream (seed 0) that kills it, the check,
# words of its message)
KILLS = [("HostPopsReversed", 0, "which blocks", "the host pool's free queue's head"),
         ("UncachedFreesAppended", 0, "free queue", "device pool after the op"),
         ("IndexerCachesOneShort", 0, "which blocks cached", "device pool: block"),
         ("CopyKeepsNoEntries", 0, "which blocks cached", "device pool: block")]


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, index, label, words", KILLS, ids=[k[0] for k in KILLS])
def test_a_broken_queue_is_caught_at_its_index(broken, index, label, words):
    broken = f"{__name__}:{broken}"
    stream = hisparse_cow.GENERATOR
    assert all(divergence("kvmanager", stream.generate(0, i), broken) is None
               for i in range(index))
    found = divergence("kvmanager", stream.generate(0, index), broken)
    assert found is not None and found.what.startswith(label), found and found.report()
    assert words in found.report(), found.report()
    assert divergence("kvmanager", stream.generate(0, index), "vllm.kvmanager") is None


@_ENGINE[0]
@_ENGINE[1]
def test_the_release_runs_a_cow_trace_with_both_queues_judged():
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    outcome = KVMANAGER.check(hisparse_cow.GENERATOR.generate(0, 1),
                              KVMANAGER.catalogue.resolve("vllm.kvmanager"))
    assert outcome.status == "agree", outcome.divergence and outcome.divergence.report()
    assert outcome.features["free queues predicted (HiSparse's two pools)"] > 100
    assert outcome.features[REQUEUED] or outcome.features[
        "an op's frees at one end of a queue, their order not predicted"]


# -- the device cache map on the plain profiles (since 2026-12-07) ----------------------------

# (profile, the first index of its stream (seed 0) where `IndexerCachesOneShort` is caught)
PLAIN = [("hisparse", 1), ("hisparse lag", 0), ("hisparse import", 1)]


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("profile, index", PLAIN, ids=[p for p, _ in PLAIN])
def test_the_indexer_caching_short_is_caught_on_the_plain_profiles(profile, index,
                                                                     monkeypatch):
    """The device cache map judged on the profiles with no Mamba group (the indexer's
    `FullAttentionManager.cache_blocks`, hashed per block): the double caching the indexer's
    batch of full blocks but its last is caught by it at the index pinned, the release clean
    there; with the check off the same trace agrees (no other reduced check sees it: a hit a
    block shorter is still a hit here; none of each profile's first 100 diverges so, measured
    2026-12-07)."""
    from kvfuzz.fuzz.kvmanager.hisparse_caching import DeviceCaching
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    broken, stream = f"{__name__}:IndexerCachesOneShort", KVMANAGER.alone(profile).generator
    assert all(divergence("kvmanager", stream.generate(0, i), broken) is None
               for i in range(index))
    trace = stream.generate(0, index)
    found = divergence("kvmanager", trace, broken)
    assert found is not None and found.what.startswith("which blocks cached"), found
    assert "device pool: block" in found.report()
    outcome = KVMANAGER.check(trace, KVMANAGER.catalogue.resolve("vllm.kvmanager"))
    assert outcome.status == "agree", outcome.divergence and outcome.divergence.report()
    assert outcome.features["device cache map predicted (HiSparse's device pool)"] > 10
    assert not outcome.features["device cache map not judged (an op out of reach)"]
    monkeypatch.setattr(DeviceCaching, "device_caching_problems", lambda self, *args: [])
    assert divergence("kvmanager", trace, broken) is None


@_ENGINE[0]
@_ENGINE[1]
def test_an_imports_report_caches_the_indexer_and_moves_its_count(monkeypatch):
    """A second connector's import's ops are judged since 2026-12-08 (`hisparse_queue.py`):
    its load's report caches the indexer's full blocks from its hit's count to the valid
    tokens and leaves the count there (`DeviceCaching.imported`; the scheduler's
    `cache_blocks` in `_update_waiting_for_remote_kv`). The release is clean on "hisparse
    import" indices 0 and 29; a judge that caches nothing at the report is wrong at index 0, op
    35 (r5's failed load: the release caches its indexer block 1 there), and one that leaves
    the count at the hit's is wrong at index 29
    (the blocks past it expected cached again at a later step, where an eviction had dropped
    one the release does not cache twice: found 2026-12-07 on the resumption's count)."""
    from kvfuzz.fuzz.kvmanager.hisparse_caching import DeviceCaching
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    traces = [KVMANAGER.alone("hisparse import").generator.generate(0, i) for i in (0, 29)]
    assert [divergence("kvmanager", t, "vllm.kvmanager") for t in traces] == [None, None]
    imported = DeviceCaching.imported

    def caches_nothing(self, rid, tokens):
        imported(self, rid, tokens)
        self.caching_imports[-1] = (rid, (0, 0))
    monkeypatch.setattr(DeviceCaching, "imported", caches_nothing)
    found = divergence("kvmanager", traces[0], "vllm.kvmanager")
    assert found is not None and found.what.startswith("which blocks cached at op 35 "), found

    def count_left(self, rid, tokens):
        imported(self, rid, tokens)
        self.caching_counts.pop(rid, None)
    monkeypatch.setattr(DeviceCaching, "imported", count_left)
    found = divergence("kvmanager", traces[1], "vllm.kvmanager")
    assert found is not None and found.what.startswith("which blocks cached"), found
