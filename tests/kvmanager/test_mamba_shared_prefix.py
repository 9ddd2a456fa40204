"""Mamba's shared-prefix checkpoint beside an "align" group (`Trace.mamba_shared_prefix`, vLLM's
`enable_mamba_shared_prefix_checkpoint`, `fuzz/kvmanager/align_shared_prefix.py`): the codec
takes it only where vLLM's manager turns it on, the reduced mode cuts a prefill chunk at the
junction as the scheduler does and asks the junction's state keyed after a step ending there,
and the "mamba align" profile draws it last (its other traces as before); on the released vLLM
the profile's traces with it run clean reaching the cut and the keyed state, and the
catalogue's mutant is caught by that check, and MAMBA_SHARED_PREFIX runs guarded. The vLLM parts
are slow."""

from __future__ import annotations

import functools
from dataclasses import replace
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.kvmanager import align_shared_prefix
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import hybrid, mamba_shared_prefix
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import (TARGETS, agreeing_features, divergence, made_and_with_draw_off,
                           needs_engine, without_align_caching_check)


def _vllm(test):
    """The test marked as those that import vLLM are (slow; skipped without it)."""
    for mark in needs_engine("vllm"):
        test = mark(test)
    return test


def _header(**more) -> dict:
    return {"format": "kvfuzz-kvmanager-trace/1", "blocks": 12, "block_size": 4, "window": 0,
            "max_model_len": 64, "mamba_mode": "align", "eagle": True, "hash_block_size": 2,
            "mamba_shared_prefix": True,
            "ops": [{"op": "arrive", "rid": 1, "tokens": list(range(9))},
                    {"op": "schedule", "rid": 1, "chunk": 9}]} | more


def test_the_codec_takes_it_only_where_vllm_turns_it_on():
    trace = from_json(_header())
    assert trace.mamba_shared_prefix and from_json(to_json(trace)) == trace
    assert not from_json(_header(mamba_shared_prefix=False)).mamba_shared_prefix
    assert "mamba_shared_prefix" not in to_json(from_json(_header(mamba_shared_prefix=False)))
    assert from_json(_header(prefill_lookahead=1)).mamba_shared_prefix
    # vLLM's manager: EAGLE groups, partial hash hits (a hash block below the Mamba block),
    # no MTP tokens re-prefilled; a Mamba "align" group and caching for any of it
    for wrong in ({"eagle": False}, {"hash_block_size": 4}, {"hash_block_size": 0},
                  {"mamba_mode": "", "hash_block_size": 0}):
        with pytest.raises(FormatError, match="mamba_shared_prefix"):
            from_json(_header(**wrong))


def _request(prompt: int, boundary: int, computed: int = 0):
    tokens = tuple(range(100, 100 + prompt))
    return SimpleNamespace(prompt=prompt, boundary=boundary, computed=computed, tokens=tokens,
                           hashes=lambda size, lookahead=0: [1000 + end for end in range(
                               size, prompt + 1, size)])


def test_a_chunk_stops_at_the_junction_within_the_prompt():
    on = SimpleNamespace(mamba_shared_prefix=True)
    request = _request(20, 10)
    assert align_shared_prefix.chunk(on, request, 0, 16) == 10
    assert align_shared_prefix.chunk(on, request, 4, 6) == 6     # ends there: as drawn
    assert align_shared_prefix.chunk(on, request, 10, 8) == 8    # starts there
    assert align_shared_prefix.chunk(SimpleNamespace(mamba_shared_prefix=False), request,
                                     0, 16) == 16
    assert align_shared_prefix.chunk(on, _request(8, 10), 0, 16) == 16  # past the prompt
    assert align_shared_prefix.chunk(on, _request(20, 0), 0, 16) == 16  # no junction


def test_the_junctions_state_must_be_keyed_after_a_step_to_it():
    trace = SimpleNamespace(mamba_shared_prefix=True, block_size=4, hash_size=2,
                            hash_lookahead=0)
    request = _request(20, 10, computed=10)
    table = [0, 7, 9]   # column (10 - 1) // 4 = 2: block 9
    keyed = {9: [(1010, 1)]}
    entries = lambda block: keyed.get(block, [])  # noqa: E731
    assert align_shared_prefix.step_problem(trace, request, 4, False, table, entries) == \
        (True, None)
    written, wrong = align_shared_prefix.step_problem(trace, request, 4, False, table,
                                                      lambda block: [(1008, 1)])
    assert written and "junction 10" in wrong and "hash of 10 tokens" in wrong
    # not judged: a step taking a prefill checkpoint block (the manager's checkpoint branch),
    # one starting at the junction, one not ending there, the setting off
    for args in ((4, True), (10, False)):
        assert align_shared_prefix.step_problem(trace, request, *args, table,
                                                lambda block: []) == (False, None)
    assert align_shared_prefix.step_problem(trace, _request(20, 10, 12), 4, False, table,
                                            lambda block: []) == (False, None)
    assert align_shared_prefix.step_problem(replace_ns(trace, mamba_shared_prefix=False),
                                            request, 4, False, table,
                                            lambda block: []) == (False, None)


def test_retention_zero_keeps_a_junctions_state():
    """`reachable_block_mask` keeps the state block ending at the junction cut to the hash
    block, then the block, and with EAGLE's drop a block below too (setting on or off)."""
    trace = SimpleNamespace(mamba_shared_prefix=False, block_size=4, hash_size=2,
                            hash_lookahead=0, retention=0, eagle=True)
    assert align_shared_prefix.retained_ends(trace, 10) == {8, 4}
    assert align_shared_prefix.retained_ends(replace_ns(trace, eagle=False), 10) == {8}
    assert align_shared_prefix.retained_ends(trace, 5) == {4}   # (5 - 4 = 1: nothing)
    request = _request(20, 10, computed=8)
    table = [0, 6]
    keyed = lambda block: [(1008, 1)] if block == 6 else []  # noqa: E731
    assert align_shared_prefix.retention_problem(trace, request, 4, table, keyed) == \
        (True, None)
    written, wrong = align_shared_prefix.retention_problem(trace, request, 4, table,
                                                           lambda block: [])
    assert written and "junction 10" in wrong and "hash of 8 tokens" in wrong
    # not judged: another retention, a step from the state's end, no junction
    for other, read_from, junction in ((replace_ns(trace, retention=None), 4, 10),
                                       (trace, 8, 10), (trace, 4, 0)):
        assert align_shared_prefix.retention_problem(
            other, _request(20, junction, computed=8), read_from, table,
            lambda block: []) == (False, None)


def replace_ns(namespace, **more):
    return SimpleNamespace(**(vars(namespace) | more))


def test_the_profile_draws_it_last(monkeypatch):
    """Its traces with the setting off are those the profile made before the draw, and with it
    on the same but for it; only where vLLM turns it on (with tokens in flight too since
    2026-12-06, later: `test_async_shared_prefix.py`)."""
    made, before = made_and_with_draw_off(monkeypatch, mamba_shared_prefix,
                                          hybrid.MAMBA_ALIGN, 100)
    drawn = 0
    for index, trace in enumerate(made):
        drawn += trace.mamba_shared_prefix
        assert not trace.mamba_shared_prefix or mamba_shared_prefix.applies(trace), index
        # (multi-module MTP, drawn after it for EAGLE traces without it: test_mamba_eagle_mtp.py)
        mtp = before[index].prefill_lookahead if trace.mamba_shared_prefix else \
            trace.prefill_lookahead
        assert replace(trace, mamba_shared_prefix=False, prefill_lookahead=mtp) == \
            before[index], index
        from_json(to_json(trace))  # (the codec takes every one)
    assert 4 <= drawn <= 20, drawn


@functools.cache
def _indices(count: int) -> tuple[int, ...]:
    """The profile's first `count` traces of seed 0 with it (its 20th is index 352)."""
    found = [i for i in range(360) if hybrid.MAMBA_ALIGN.generate(0, i).mamba_shared_prefix]
    return tuple(found[:count])


FIRST = 20  # the profile's first traces of seed 0 with it the release runs here


@_vllm
def test_the_profiles_traces_with_it_run_clean_reaching_the_junction():
    from kvfuzz.impl.kvmanager import RELEASED

    events = agreeing_features("kvmanager", TARGETS["kvmanager"].catalogue.resolve(RELEASED),
                               (hybrid.MAMBA_ALIGN.generate(0, i) for i in _indices(FIRST)))
    assert events[align_shared_prefix.CUT] and events[align_shared_prefix.KEYED], events


@_vllm
def test_the_setting_not_passed_is_caught(monkeypatch):
    """A driver that drops the setting (the manager's junction branch off): the check names
    the junction's state not keyed, on the profile's first traces with it."""
    from kvfuzz.fuzz.kvmanager import lockstep

    build = lockstep.KVManagerLockstep.build_impl
    monkeypatch.setattr(lockstep.KVManagerLockstep, "build_impl",
                        lambda self, trace, *args, **more: build(
                            self, replace(trace, mamba_shared_prefix=False), *args, **more))
    found = next((found for found in (divergence(
        "kvmanager", hybrid.MAMBA_ALIGN.generate(0, i), "vllm.kvmanager")
        for i in _indices(FIRST)) if found), None)
    assert found is not None and "shared-prefix checkpoint" in found.report(), found


@_vllm
def test_the_catalogue_mutant_of_the_junction_is_caught(monkeypatch):
    """Caught, and by this module's own check with the caching check (`align_caching.py`,
    which sees the missing entry first where it judges the op) off."""
    mutant = "mutant.vllm.kvmanager.mamba_align_shared_prefix_junction_missed"

    def first_found():
        return next((found for found in (divergence(
            "kvmanager", hybrid.MAMBA_ALIGN.generate(0, i), mutant)
            for i in _indices(FIRST)) if found), None)

    assert first_found() is not None
    without_align_caching_check(monkeypatch)
    found = first_found()
    assert found is not None and "shared-prefix checkpoint" in found.report() and \
        "not cached under the request's hash" in found.report(), found


@_vllm
def test_mamba_eagle_with_the_shared_prefix_checkpoint_runs_guarded_and_replays(tmp_path):
    """MAMBA_SHARED_PREFIX: MAMBA_EAGLE hashed per 2 tokens with the cache config's
    `enable_mamba_shared_prefix_checkpoint`; session 0 guarded in the reduced mode, clean, the
    same as unguarded, recorded equal and replaying, the header's setting read from the manager
    and the junction's state judged keyed (vLLM's scheduler ends the chunk there itself)."""
    from tests.kvmanager.test_guard import clean_and_replaying

    guarded = clean_and_replaying(0, "MAMBA_SHARED_PREFIX", tmp_path).manager.kvfuzz_session
    assert guarded.header.mamba_shared_prefix and guarded.header.eagle
    assert guarded.header.hash_block_size == 2
    assert guarded.lock.events[align_shared_prefix.KEYED], guarded.lock.events


@_vllm
def test_a_release_dropping_the_junction_from_retention_is_caught(monkeypatch):
    """vLLM's `cache_blocks` blind to `request.shared_prefix_boundary` (its reachable boundaries
    the replay ones only): under retention 0 the junction's state is dropped, which the
    retention check names (and no other check first: on the profile's first 300 indices its
    117 retention-0 traces, 17 caught, all by it)."""
    import sys

    from kvfuzz.impl.registry import load_attribute

    load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")  # (vLLM as kvfuzz loads it)
    managers = sys.modules["vllm.v1.core.single_type_kv_cache_manager"]
    cache_blocks = managers.SingleTypeKVCacheManager.cache_blocks

    def blind(self, request, *args, **more):
        boundary, request.shared_prefix_boundary = request.shared_prefix_boundary, 0
        try:
            return cache_blocks(self, request, *args, **more)
        finally:
            request.shared_prefix_boundary = boundary
    monkeypatch.setattr(managers.SingleTypeKVCacheManager, "cache_blocks", blind)
    found = divergence("kvmanager", hybrid.MAMBA_ALIGN.generate(0, 21), "vllm.kvmanager")
    assert found is not None and "retention" in found.report() and \
        "for the shared-prefix junction" in found.report(), found
