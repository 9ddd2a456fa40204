"""HiSparse's host cache map predicted entry by entry (`fuzz/kvmanager/hisparse_hostcache.py`):
doubles of the released coordinator whose host pool keys its pages otherwise, each with keys
the bounded checks ("published early", "published late") take as published and caught by the
new check ("host cache map") at the stream's index pinned here, where the release agrees
(skipped without vLLM); and the check on plain data, each broken map caught (no vLLM)."""

import functools
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.kvmanager.hisparse_hostcache import JUDGED, HostCaching
from kvfuzz.strategies.kvmanager import hisparse, hisparse_cow, hisparse_lag
from tests.helpers import divergence, needs_engine
from tests.kvmanager.hisparse_doubles import broken_manager


class _Judge(HostCaching):
    """The check alone on plain data: blocks of 2 tokens hashed per 2, a host pool of 6."""

    def __init__(self, before):
        self.trace = SimpleNamespace(block_size=2)
        self.unit, self.reset_done, self.counted = 2, False, []
        self.start_host_caching()
        self.host_keys = before

    def count(self, name, times=1):
        self.counted.append(name)


def _problems(after, evicted=(), reset=False):
    """Block 1 cached before (key 10); the op evicts `evicted` and publishes a request's first
    two pages (keys 11 and 12) on blocks 3 and 4."""
    judge = _Judge([None, (10, 0), None, None, None, None])
    judge.reset_done, judge.host_evicted = reset, list(evicted)
    judge.host_inserts = [([3, 4], 0, 4, [11, 12], 5)]
    return judge.host_caching_problems(after), judge.counted


def test_the_host_map_is_the_map_before_less_evictions_plus_publications():
    assert _problems([None, (10, 0), None, (11, 0), (12, 0), None]) == ([], [JUDGED])
    assert _problems([None, None, None, (11, 0), (12, 0), None], evicted=[1])[0] == []
    assert _problems([None, None, None, (11, 0), (12, 0), None], reset=True)[0] == []


@pytest.mark.parametrize("after", [
    [None, (10, 0), None, (11, 0), None, None],  # a page not published
    [None, (10, 0), None, (11, 0), (12, 1), None],  # published under another group
    [None, None, None, (11, 0), (12, 0), None],  # an entry lost with no eviction
    [None, (10, 0), (12, 0), (11, 0), (12, 0), None],  # a page keyed twice
])
def test_each_broken_host_map_is_caught(after):
    problems, _ = _problems(after)
    assert problems and problems[0][0] == "host cache map", problems


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class whose host publication breaks one rule each. Built on
    first use."""
    Broken = broken_manager()

    class HostKeysUnderIndexerGroup(Broken):  # the host pool keys its pages as group 1's
        @staticmethod
        def break_(coordinator):
            pool = coordinator.host_manager.block_pool
            cache = pool.cache_full_blocks

            def keyed(*args, **kwargs):
                kwargs["kv_cache_group_id"] = 1
                cache(*args, **kwargs)
            pool.cache_full_blocks = keyed

    class HostPartialTailNotKept(Broken):  # the prompt's partial tail never keyed on the host
        @staticmethod
        def break_(coordinator):
            coordinator.host_manager._cache_partial_tail_block = lambda request, tokens: None

    return {cls.__name__: cls for cls in (HostKeysUnderIndexerGroup, HostPartialTailNotKept)}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_hisparse_hostcache:...
    if name in ("HostKeysUnderIndexerGroup", "HostPartialTailNotKept"):
        return doubles()[name]
    raise AttributeError(name)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)
STREAMS = {"hisparse": hisparse.GENERATOR, "hisparse cow": hisparse_cow.GENERATOR,
           "hisparse lag": hisparse_lag.GENERATOR}

# (double, its stream, the first index (seed 0) that kills it)
KILLS = [("HostKeysUnderIndexerGroup", "hisparse", 0),
         ("HostPartialTailNotKept", "hisparse cow", 0)]


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, stream, index", KILLS, ids=[k[0] for k in KILLS])
def test_a_broken_host_publication_is_caught_at_its_index(broken, stream, index):
    broken, generator = f"{__name__}:{broken}", STREAMS[stream]
    assert all(divergence("kvmanager", generator.generate(0, i), broken) is None
               for i in range(index))
    found = divergence("kvmanager", generator.generate(0, index), broken)
    assert found is not None and found.what.startswith("host cache map"), \
        found and found.report()
    assert "host pool: block" in found.report(), found.report()
    assert divergence("kvmanager", generator.generate(0, index), "vllm.kvmanager") is None


@_ENGINE[0]
@_ENGINE[1]
def test_the_release_runs_a_lag_trace_with_every_host_map_judged():
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    outcome = KVMANAGER.check(hisparse_lag.GENERATOR.generate(0, 0),
                              KVMANAGER.catalogue.resolve("vllm.kvmanager"))
    assert outcome.status == "agree", outcome.divergence and outcome.divergence.report()
    assert outcome.features[JUDGED] > 100
