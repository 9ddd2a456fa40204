"""KV events and prefix-cache stats beside a Mamba "align" group (`fuzz/kvmanager/align_events.py`):
the codec takes them with mode "align" (hits reported and a connector's ops too since 2026-12-07:
`test_align_reported.py`),
the "mamba align" profile draws them last, each events check fires on a hand-made wrong event
(no vLLM), and (`slow`, vLLM) the released class agrees while the catalogue mutant and test
doubles of the events and of the stats are caught by these checks alone."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.kvmanager import align_events
from kvfuzz.fuzz.kvmanager.align_events import AlignEvents, stored_problem
from kvfuzz.fuzz.kvmanager.lock_request import _Request
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.blockpool.events import Cleared, Removed, Stored
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import align_observed, hybrid
from kvfuzz.strategies.kvmanager.connector_ops import OPS as CONNECTOR_OPS
from tests.helpers import agreeing_features, divergence, made_and_with_draw_off, with_engine


def _round_trip(trace, **changes):
    data = KVMANAGER.codec.to_json(replace(trace, **changes))
    return KVMANAGER.codec.from_json(data, "test")


def test_codec_takes_events_and_stats_with_mode_align():
    """Hits reported too since 2026-12-07 (`align_reported.py`)."""
    trace = hybrid.MAMBA_ALIGN.generate(0, 0)
    back = _round_trip(trace, events=True, stats=True)
    assert (back.mamba_mode, back.events, back.stats) == ("align", True, True)
    assert _round_trip(trace, events=True, report=True).report


def test_codec_takes_events_beside_a_connector_in_mode_align():
    """Refused until 2026-12-07 (a load's admission not recorded): `align_recorded.py`."""
    from kvfuzz.strategies.kvmanager import mamba_connector

    trace = next(t for t in (mamba_connector.GENERATOR.generate(0, i) for i in range(20))
                 if any(op["op"] in CONNECTOR_OPS for op in
                        KVMANAGER.codec.to_json(t)["ops"]))
    for field in ("events", "stats", "report"):
        assert getattr(_round_trip(trace, **{field: True}), field)


def test_the_profile_draws_events_last(monkeypatch):
    """A share observes both; with the draw off every trace is the one it was before (only
    its events and stats differ where on)."""
    drawn, off = made_and_with_draw_off(monkeypatch, align_observed, hybrid.MAMBA_ALIGN, 60)
    on = sum(t.events for t in drawn)
    assert 10 < on < 40 and all(t.events == t.stats for t in drawn)
    assert [replace(t, events=False, stats=False, report=False) for t in drawn] == off


# -- the events checks on hand-made events (no vLLM) ------------------------------------------

def _trace(**more):
    settings = dict(block_size=4, hash_size=2, hash_lookahead=0, events=True, stats=True,
                    full_last=False, caching=True)
    return SimpleNamespace(**(settings | more))


def _request(trace, tokens=tuple(range(100, 112))):
    request = _Request(tokens)
    units = request.hashes(trace.hash_size, trace.hash_lookahead)
    return request, units


def _whole(units, tokens, start, count, group=0, skip=(), trace=None):
    """The Stored of blocks [start, start + count) of 4 tokens hashed per 2, as vLLM builds it."""
    blocks = units[1::2]
    kept = [i for i in range(start, start + count) if i not in skip]
    return Stored(tuple(blocks[i] for i in kept), blocks[start - 1] if start else None,
                  tuple(tokens[start * 4:(start + count) * 4]), 4, group,
                  tuple(None for _ in kept) or None, None, align_events.KINDS[group], None)


def test_a_stored_as_the_release_builds_it_passes():
    trace = _trace()
    request, units = _request(trace)
    tokens = request.tokens
    assert stored_problem(_whole(units, tokens, 0, 2), 0, request, trace) is None
    assert stored_problem(_whole(units, tokens, 1, 2, group=1, skip=(1,)), 1, request,
                          trace) is None  # the Mamba group's nulls left out
    partial = Stored((units[2],), units[1], tuple(tokens[4:6]), 2, 0, (None,), None,
                     "full_attention", None)
    assert stored_problem(partial, 0, request, trace) is None


@pytest.mark.parametrize("change, says", [
    (dict(parent=7), "parent"),
    (dict(tokens=(1, 2, 3, 4, 5, 6, 7, 8)), "tokens"),
    (dict(block_size=3), "block size"),
    (dict(kind="mamba"), "kind"),
    (dict(hashes=(5, 6)), "hashes"),
    (dict(extra_keys=None), "extra keys"),
    (dict(lookahead=((1,), (2,))), "lookahead"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_each_field_of_a_wrong_stored_is_reported(change, says):
    trace = _trace()
    request, units = _request(trace)
    event = replace(_whole(units, request.tokens, 0, 2), **change)
    assert says in stored_problem(event, 0, request, trace)


def test_a_wrong_partial_entry_is_reported():
    trace = _trace()
    request, units = _request(trace)
    partial = Stored((units[2],), units[0], tuple(request.tokens[4:6]), 2, 0, (None,), None,
                     "full_attention", None)
    assert "parent" in stored_problem(partial, 0, request, trace)
    assert "tokens" in stored_problem(replace(partial, parent=units[1], tokens=(1, 2)), 0,
                                      request, trace)


class _Lock(AlignEvents):
    """The mixin alone: the pool's cache map after the op is `cache`."""

    def __init__(self, trace, cache, request):
        self.trace, self.cache, self.requests, self.unread = trace, cache, {1: request}, ()
        self.reset_done, self.counted = False, Counter()
        self.start_events(trace)

    def count(self, name):
        self.counted[name] += 1


def _problems(lock, events, reset=False):
    stats = replace(lock.align_stats, reset=reset).as_tuple()  # (the stats right)
    return lock.observed_problems((events, stats, reset), 1)


def test_the_events_replayed_are_the_pool_s_entries():
    trace = _trace()
    request, units = _request(trace)
    stored = _whole(units, request.tokens, 0, 2)
    keys = {(h, 0): [b] for h, b in zip(stored.hashes, (1, 2))}
    assert _problems(_Lock(trace, keys, request), [stored]) == []
    missing = _Lock(trace, {}, request)  # announced, not cached
    assert "KV events" in _problems(missing, [stored])[0]
    unannounced = _Lock(trace, keys, request)  # cached, never announced
    assert "the pool's map holds it in 1" in _problems(unannounced, [])[0][1]
    twice = _Lock(trace, keys, request)
    assert "in 2 block(s)" in _problems(twice, [stored, stored])[0][1]


def test_a_removal_of_an_entry_not_announced_is_reported():
    trace = _trace()
    request, units = _request(trace)
    lock = _Lock(trace, {}, request)
    assert "no Stored announced" in _problems(lock, [Removed((units[1],), 0)])[0][1]
    stored = _whole(units, request.tokens, 0, 1)
    assert _problems(_Lock(trace, {}, request), [stored, Removed((units[1],), 0)]) == []


def test_cleared_exactly_at_a_reset_that_succeeded():
    trace = _trace()
    request, _ = _request(trace)
    assert _problems(_Lock(trace, {}, request), [Cleared()], reset=True) == []
    assert "did not reset" in _problems(_Lock(trace, {}, request), [Cleared()])[0][1]
    assert "0 AllBlocksCleared" in _problems(_Lock(trace, {}, request), [], reset=True)[0][1]


def test_the_stats_are_the_admissions_recorded():
    trace = _trace(events=False)
    request, _ = _request(trace)
    lock = _Lock(trace, {}, request)
    list(lock.align_record(1, request, 4))
    expected = (1, 12, 4, 0, 0, 0, False)
    assert lock.observed_problems((None, expected, False), 1) == []
    list(lock.align_record(1, request, 4))
    assert "prefix cache stats" in lock.observed_problems((None, (1, 12, 0, 0, 0, 0, False),
                                                           False), 1)[0][0]
    assert lock.observed_problems((None, (0, 0, 0, 0, 0, 0, True), True), 1) == []
    request.preempted = True
    list(lock.align_record(1, request, 2))
    assert lock.observed_problems((None, (0, 0, 0, 1, 12, 2, False), False), 1) == []


# -- the released class and broken ones (vLLM) ------------------------------------------------

@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking what one events or stats check sees."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class DropsMambaStored(KVCacheManager):
        def take_events(self):
            return [e for e in super().take_events()
                    if not (type(e).__name__ == "BlockStored" and e.group_idx == 1)]

    class PartialTokensShifted(KVCacheManager):
        def take_events(self):
            events = super().take_events()
            for event in events:
                if type(event).__name__ == "BlockStored" and len(event.token_ids) < 4:
                    event.token_ids = list(event.token_ids[1:]) + [0]
            return events

    class StatsMissHits(KVCacheManager):
        def record_prefix_cache_stats(self, request, num_hits):
            super().record_prefix_cache_stats(request, 0)
    return {cls.__name__: cls for cls in (DropsMambaStored, PartialTokensShifted,
                                          StatsMissHits)}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_align_events:...
    if name in ("DropsMambaStored", "PartialTokensShifted", "StatsMissHits"):
        return doubles()[name]
    raise AttributeError(name)


def _observed_traces(count: int):
    return [t for t in (hybrid.MAMBA_ALIGN.generate(0, i) for i in range(count)) if t.events]


@with_engine("vllm")
@pytest.mark.parametrize("broken, label", [
    ("mutant.vllm.kvmanager.mamba_align_checkpoint_removed_silently", "KV events"),
    (f"{__name__}:DropsMambaStored", "KV events"),
    (f"{__name__}:PartialTokensShifted", "KV events"),
    (f"{__name__}:StatsMissHits", "prefix cache stats"),
    ("mutant.vllm.kvmanager.stats_preempted_as_new", "prefix cache stats"),
    ("mutant.vllm.kvmanager.reset_not_in_stats", "prefix cache stats"),
], ids=lambda value: value.rsplit(".", 1)[-1].rsplit(":", 1)[-1])
def test_each_check_catches_a_broken_manager_alone(broken, label):
    """Caught on the profile's first traces that observe events and stats, by the check named;
    the same trace observing neither agrees (no other reduced check sees it)."""
    found = next((trace, d) for trace in _observed_traces(80)
                 if (d := divergence("kvmanager", trace, broken)))
    trace, divergence_ = found
    assert divergence_.what.startswith(label), divergence_.report()
    assert divergence("kvmanager", replace(trace, events=False, stats=False), broken) is None


@with_engine("vllm")
def test_the_release_agrees_observing_every_trace():
    """The released class on the profile's first 150 traces, each observing events and stats
    (the drawn share aside), reaching every edge class of the events."""
    reached = agreeing_features(
        "kvmanager", KVMANAGER.catalogue.resolve("vllm.kvmanager"),
        (replace(hybrid.MAMBA_ALIGN.generate(0, i), events=True, stats=True) for i in range(150)))
    assert all(reached[name] for name in align_events.OWN), reached


@with_engine("vllm")
def test_full_attention_last_its_events_read_by_the_trace_s_group_ids(monkeypatch):
    """"full last"'s "align" kind (the Mamba group first, `align_order.py`) with both forced on:
    the release agrees; read by the manager's group ids, its events' kinds are wrong."""
    from kvfuzz.strategies.kvmanager import streams

    impl = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    traces = [replace(t, events=True, stats=True) for t in
              (streams.ALONE["full last"].generate(0, i) for i in range(12))
              if t.mamba_mode == "align"][:3]
    assert traces and all(KVMANAGER.check(t, impl).divergence is None for t in traces)
    monkeypatch.setattr(align_events, "align_order", SimpleNamespace(order=lambda trace: None))
    found = KVMANAGER.check(traces[0], impl).divergence
    assert found is not None and found.what.startswith("KV events"), found
