"""Hits reported beside a Mamba "align" group (`fuzz/kvmanager/align_reported.py`) and a KV
connector's admissions recorded in its stats (`align_recorded.py`), since 2026-12-07: the
profiles draw them last (other traces unchanged), a reported hit's events are checked field by
field on hand-made events (no vLLM), and (`slow`, vLLM) the release agrees while doubles of
each new check, the catalogue's `mamba_align_report_clamped` and the release's IndexError
(a finding, pinned) are caught. Since 2026-12-07 (later) "mamba connector" reports hits too
(drawn last): a double caught there, the release reporting at a connector's lookup and raising
beside its ops."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.kvmanager import align_reported
from kvfuzz.fuzz.kvmanager.align_events import AlignEvents
from kvfuzz.fuzz.kvmanager.lock_request import _Request
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.blockpool.events import Stored
from kvfuzz.strategies.kvmanager import align_observed, hybrid, mamba_connector
from tests.helpers import divergence, loads, made_and_with_draw_off, with_engine

# the release's IndexError, shrunk from "mamba align" index 89 (4 ops): an 11-token prompt in
# blocks of 4 hashed per 2, scheduled whole, preempted and admitted again with a hit of 10
RAISES = Path(__file__).parents[2] / "corpus" / "kvmanager-838255ee58de4bf0.json"


def test_the_align_profile_draws_hits_reported_last(monkeypatch):
    """Half of the traces observing their events report their hits; with the draw off every
    trace is the one it was before."""
    drawn = [hybrid.MAMBA_ALIGN.generate(0, index) for index in range(80)]
    with monkeypatch.context() as patched:
        patched.setattr(align_observed, "REPORTED_SHARE", 0.0)
        off = [hybrid.MAMBA_ALIGN.generate(0, index) for index in range(80)]
    reported = sum(t.report for t in drawn)
    assert 5 < reported < sum(t.events for t in drawn) and all(t.events for t in drawn
                                                                if t.report)
    assert [replace(t, report=False) for t in drawn] == off


def test_the_connector_profile_draws_events_and_stats_last(monkeypatch):
    drawn, off = made_and_with_draw_off(monkeypatch, align_observed,
                                        mamba_connector.GENERATOR, 60)
    on = sum(t.events for t in drawn)
    assert 10 < on < 40 and all(t.events == t.stats for t in drawn)
    assert all(t.events for t in drawn if t.report)
    assert [replace(t, events=False, stats=False, report=False) for t in drawn] == off


def test_the_connector_profile_draws_hits_reported_last(monkeypatch):
    """Since 2026-12-07 half of the "mamba connector" traces observing their events report
    their hits (drawn after every other draw, for those only); with the draw off every trace
    is the one it was before."""
    drawn = [mamba_connector.GENERATOR.generate(0, index) for index in range(80)]
    with monkeypatch.context() as patched:
        patched.setattr(align_observed, "CONNECTOR_REPORTED_SHARE", 0.0)
        off = [mamba_connector.GENERATOR.generate(0, index) for index in range(80)]
    reported = sum(t.report for t in drawn)
    assert 5 < reported < sum(t.events for t in drawn) and not any(t.report for t in off)
    assert [replace(t, report=False) for t in drawn] == off


# -- a reported hit's events on hand-made events (no vLLM) ------------------------------------

def _trace(**more):
    settings = dict(block_size=4, hash_size=2, hash_lookahead=0, events=True, stats=True,
                    report=True, full_last=False, caching=True)
    return SimpleNamespace(**(settings | more))


class _Lock(AlignEvents):
    """The mixins alone: the pool's cache map after the op is `cache`, a hit of `count` blocks
    per group reported for r1."""

    def __init__(self, trace, cache, request, count):
        self.trace, self.cache, self.requests, self.unread = trace, cache, {1: request}, ()
        self.reset_done, self.counted = False, Counter()
        self.start_events(trace)
        self.reported_due = [(request, 0, count), (request, 1, count)]

    def count(self, name):
        self.counted[name] += 1


def _reported(request, trace, count):
    return [align_reported.expected_stored(request, group, count, trace) for group in (0, 1)]


def _problems(lock, events):
    stats = lock.align_stats.as_tuple()
    return lock.observed_problems((events, stats, False), 1)


def test_a_hit_reported_as_the_release_builds_it_is_left_out_of_the_replay():
    trace, request = _trace(), _Request(tuple(range(100, 112)))
    events = _reported(request, trace, 2)
    assert events[0].hashes == tuple(request.hashes(2, 0)[1:4:2]) and events[0].parent is None
    assert events[1].hashes == events[0].hashes and events[1].tokens == tuple(range(100, 108))
    assert _problems(_Lock(trace, {}, request, 2), events) == []  # nothing announced anew


@pytest.mark.parametrize("change, says", [
    (dict(parent=7), "parent"),
    (dict(tokens=tuple(range(100, 107))), "tokens"),
    (dict(block_size=2), "block_size"),
    (dict(hashes=(5, 6)), "hashes"),
    (dict(extra_keys=None), "extra_keys"),
    (dict(lookahead=((1,), (2,))), "lookahead"),
    (dict(group=1), "group 1's"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_each_field_of_a_wrong_reported_event_is_reported(change, says):
    trace, request = _trace(), _Request(tuple(range(100, 112)))
    events = _reported(request, trace, 2)
    events[0] = replace(events[0], **change)
    problems = _problems(_Lock(trace, {}, request, 2), events)
    assert problems and "a hit reported" in problems[0][1] and says in problems[0][1], problems


def test_a_hit_reported_short_of_its_events_is_reported():
    trace, request = _trace(), _Request(tuple(range(100, 112)))
    problems = _problems(_Lock(trace, {}, request, 2), _reported(request, trace, 2)[:1])
    assert "expected a Stored" in problems[0][1]


# -- the released class and broken ones (vLLM) ------------------------------------------------

@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking what one new check sees."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class ReportedTokensShort(KVCacheManager):
        """A hit reported with its last token left out of each event."""

        def get_computed_blocks(self, request, *args, **kwargs):
            queue = self.block_pool.kv_event_queue
            before = len(queue)
            got = super().get_computed_blocks(request, *args, **kwargs)
            for event in queue[before:]:
                event.token_ids = list(event.token_ids[:-1])
            return got

    class LoadCachedSilently(KVCacheManager):
        """A load reported done caches its blocks with no BlockStored."""

        def cache_blocks(self, request, num_computed_tokens):
            queue = self.block_pool.kv_event_queue
            before = len(queue)
            super().cache_blocks(request, num_computed_tokens)
            del queue[before:]

    class ExternalCountedAsHits(KVCacheManager):
        """A connector's external tokens recorded as prefix-cache hits."""

        def allocate_slots(self, request, *args, num_external_computed_tokens=0, **kwargs):
            self.__dict__.setdefault("external", {})[request.request_id] = \
                num_external_computed_tokens
            return super().allocate_slots(
                request, *args, num_external_computed_tokens=num_external_computed_tokens,
                **kwargs)

        def record_prefix_cache_stats(self, request, num_hits):
            more = self.__dict__.get("external", {}).get(request.request_id, 0)
            super().record_prefix_cache_stats(request, num_hits + more)
    return {cls.__name__: cls for cls in (ReportedTokensShort, LoadCachedSilently,
                                          ExternalCountedAsHits)}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_align_reported:...
    if name in ("ReportedTokensShort", "LoadCachedSilently", "ExternalCountedAsHits"):
        return doubles()[name]
    raise AttributeError(name)


def _first_caught(generator, broken, field, count: int = 60):
    """The first of the profile's first `count` traces with `field` on that `broken` diverges
    on, and its divergence."""
    return next((trace, found) for trace in (generator.generate(0, i) for i in range(count))
                if getattr(trace, field) and (found := divergence("kvmanager", trace, broken)))


@with_engine("vllm")
@pytest.mark.parametrize("generator, broken, field, label, off", [
    (hybrid.MAMBA_ALIGN, "ReportedTokensShort", "report", "KV events", dict(report=False)),
    (hybrid.MAMBA_ALIGN, "mutant.vllm.kvmanager.mamba_align_report_clamped", "report",
     "KV events", dict(report=False)),
    (mamba_connector.GENERATOR, "ReportedTokensShort", "report", "KV events",
     dict(report=False)),
    (mamba_connector.GENERATOR, "LoadCachedSilently", "events", "KV events",
     dict(events=False)),
    (mamba_connector.GENERATOR, "ExternalCountedAsHits", "stats", "prefix cache stats",
     dict(stats=False)),
], ids=["reported_tokens_short", "report_clamped", "reported_tokens_short_connector",
        "load_cached_silently", "external_counted_as_hits"])
def test_each_new_check_catches_a_broken_manager_alone(generator, broken, field, label, off):
    """Caught on the profile's first traces with the shape, by the check named; the same trace
    without it agrees (no other reduced check sees it)."""
    broken = broken if broken.startswith("mutant.") else f"{__name__}:{broken}"
    trace, found = _first_caught(generator, broken, field, 120 if "clamped" in broken else 60)
    assert found.what.startswith(label), found.report()
    assert divergence("kvmanager", replace(trace, **off), broken) is None


@with_engine("vllm")
def test_the_release_agrees_on_the_new_shapes():
    """The release on the first traces of each profile with the new shapes, reaching each new
    edge class (the IndexError included)."""
    from tests.helpers import agreeing_features

    impl = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    align = [t for t in (hybrid.MAMBA_ALIGN.generate(0, i) for i in range(100)) if t.report]
    connected = [t for t in (mamba_connector.GENERATOR.generate(0, i) for i in range(40))
                 if t.stats]
    reached = agreeing_features("kvmanager", impl, align + connected + [loads(
        RAISES.read_text())])
    assert all(reached[name] for name in (*align_reported.EVENTS, "align: a connector's "
                                          "admission recorded")), reached


@with_engine("vllm")
def test_the_release_raises_on_a_hit_reported_inside_the_prompt_s_last_block(monkeypatch):
    """The finding (2026-12-07): vLLM 0.33.0's `emit_cached_block_events` reads the hash of
    a block the prompt does not complete. The reduced mode expects it; without that
    expectation the lookup crashes with IndexError; not reporting the hit, it agrees."""
    trace = loads(RAISES.read_text())
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    assert divergence("kvmanager", replace(trace, report=False), "vllm.kvmanager") is None
    monkeypatch.setattr(align_reported.AlignReported, "_past_whole_blocks",
                        lambda self, request: False)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and "IndexError" in found.report(), found
    assert "get_computed_blocks(r9)" in found.report()


# "mamba connector" traces with events, stats and reports forced on (seed 0): index 12, where a
# plain admission's `get_computed_blocks(r15)` raises (the finding) beside the connector's ops
# (loads before it, the connector's lookup of r15 first), and index 19, where a connector's
# lookup falls back to `get_computed_blocks` and reports
RAISES_BESIDE_CONNECTOR, FALLBACK_REPORTS = 12, 19


@with_engine("vllm")
def test_the_release_reports_and_raises_beside_a_connector_s_ops(monkeypatch):
    """The reported hits beside a KV connector's ops (drawn since 2026-12-07): the release
    agrees on both traces, reaching a report by the connector's lookup and the IndexError;
    without the expectation the lookup after the connector's crashes there."""
    impl = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    raising, falling_back = (replace(mamba_connector.GENERATOR.generate(0, index), events=True,
                                     stats=True, report=True)
                             for index in (RAISES_BESIDE_CONNECTOR, FALLBACK_REPORTS))
    raised, reported = (KVMANAGER.check(trace, impl) for trace in (raising, falling_back))
    assert raised.status == reported.status == "agree"
    assert raised.features[align_reported.RAISED]
    assert reported.features[align_reported.CONNECTOR_REPORTED]
    monkeypatch.setattr(align_reported.AlignReported, "_past_whole_blocks",
                        lambda self, request: False)
    found = divergence("kvmanager", raising, impl)
    assert found is not None and "IndexError" in found.report(), found
    assert "get_computed_blocks_for_connector(r15); get_computed_blocks(r15)" in found.report()
