"""EAGLE's last-block drop beside a Mamba "align" group (`Trace.eagle` with `mamba_mode` "align",
`fuzz/kvmanager/align_eagle.py`): the codec takes it (with a connector's ops since 2026-12-07, not
with multi-module MTP there; not a prefill lookahead past the hash unit), the hit drops a hash unit in full attention only, the checkpoint sits
at EAGLE's replay boundary, retention 0 keeps the two replay boundaries, and the "mamba align"
profile draws it last (its other traces as before); on the released vLLM the profile's EAGLE
traces run clean reaching each piece, each piece of the model is needed there (without it the
judge is wrong), the catalogue's mutant is caught and MAMBA_EAGLE runs guarded. The vLLM parts
are slow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfuzz.fuzz.kvmanager import align_eagle, align_retention
from kvfuzz.oracle.kvmanager import align_hit, mamba_align
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import hybrid, mamba_eagle
from kvfuzz.strategies.kvmanager.codec import from_json
from tests.helpers import (TARGETS, agreeing_features, divergence, made_and_with_draw_off,
                           needs_engine, without_align_caching_check)


def _vllm(test):
    """The test marked as those that import vLLM are (slow; skipped without it)."""
    for mark in needs_engine("vllm"):
        test = mark(test)
    return test


FIRST = 12  # the profile's first EAGLE traces of seed 0 the release runs here


def _header(**more) -> dict:
    return {"format": "kvfuzz-kvmanager-trace/1", "blocks": 12, "block_size": 4, "window": 0,
            "max_model_len": 64, "mamba_mode": "align", "eagle": True,
            "ops": [{"op": "arrive", "rid": 1, "tokens": list(range(9))},
                    {"op": "schedule", "rid": 1, "chunk": 9}]} | more


def test_the_codec_takes_eagle_beside_an_align_group():
    assert from_json(_header()).eagle
    assert from_json(_header(hash_block_size=2, prefill_lookahead=1)).eagle
    # with a connector's ops since 2026-12-07 (`align_external_eagle.py`), and multi-module
    # MTP's held-back tokens there up to the hash unit (later that day: align_external_mtp.py)
    connect = {"op": "connect", "rid": 1, "chunk": 9, "external": 4}
    data = _header()
    data["ops"] = data["ops"][:1] + [connect] + data["ops"][1:]
    assert from_json(data).eagle and from_json(data | {"prefill_lookahead": 1}).eagle
    assert from_json(data | {"hash_block_size": 2, "prefill_lookahead": 2}).prefill_lookahead == 2
    with pytest.raises(FormatError, match="prefill_lookahead.*hash unit with EAGLE"):
        from_json(data | {"hash_block_size": 2, "prefill_lookahead": 3})
    assert from_json(_header(hash_block_size=2, prefill_lookahead=2)).eagle  # (no connector)
    # (k - 1 held back: modelled up to the hash unit, test_mamba_eagle_mtp.py)
    with pytest.raises(FormatError, match="prefill_lookahead.*hash unit with EAGLE"):
        from_json(_header(hash_block_size=1, prefill_lookahead=2))
    with pytest.raises(FormatError, match="hash_lookahead"):  # vLLM clears use_eagle then
        from_json(_header(hash_lookahead=1))


def test_the_hit_drops_a_hash_unit_in_full_attention_only():
    # 12 tokens hashed per 2 (units 0-5), blocks of 4: everything cached in both groups
    units = [100 + i for i in range(6)]
    cached = {(unit, group) for unit in units for group in (0, 1)}
    # without EAGLE a 13-token request hits 12; with it full attention looks one unit past its
    # cap (no further than the 12 hashed), drops one: 10, and the Mamba state at 10 is the hit
    assert align_hit.hybrid_hits(units, 13, 4, 2, cached) == (12, 12)
    assert align_hit.hybrid_hits(units, 13, 4, 2, cached, eagle=True) == (10, 10)
    # a 12-token request: the cap 11 plus the margin 2 reads 12, dropped to 10 (not 8)
    assert align_hit.hybrid_hits(units, 12, 4, 2, cached, eagle=True) == (10, 10)
    # the Mamba group's finder never drops: its latest state at most 10, at 8 here
    assert align_hit.hybrid_hits(units, 13, 4, 2, cached - {(105, 1), (104, 1)},
                                 eagle=True) == (10, 8)
    # hashed per block: the unit and the margin are the block
    blocks = [200, 201, 202]
    whole = {(unit, group) for unit in blocks for group in (0, 1)}
    assert align_hit.hybrid_hits(blocks, 12, 4, 4, whole) == (8, 8)
    assert align_hit.hybrid_hits(blocks, 12, 4, 4, whole, eagle=True) == (8, 8)
    assert align_hit.hybrid_hits(blocks[:2], 9, 4, 4, whole, eagle=True) == (4, 4)
    assert align_hit.hybrid_hits(blocks[:1], 5, 4, 4, whole, eagle=True) == (0, 0)


def test_the_checkpoint_sits_at_eagles_replay_boundary():
    # get_mamba_prefill_checkpoint_position with the drop: end cut to the grid, less a unit
    assert mamba_align.checkpoint_position(13, 4) == 12
    assert mamba_align.checkpoint_position(13, 4, eagle=True) == 8
    assert mamba_align.checkpoint_position(12, 4, eagle=True) == 8  # no token held back
    assert mamba_align.checkpoint_position(12, 2, eagle=True) == 10
    assert mamba_align.checkpoint_position(3, 4, eagle=True) == 0
    # a chunk [0, 13) in blocks of 4 aligned to 4: its column 2, valid either way
    assert mamba_align.checkpoint_index(0, 13, 0, 4, 4, 4) == 2
    assert mamba_align.checkpoint_index(0, 13, 0, 4, 4, 4, eagle=True) == 2
    # [0, 5): at 4 without the drop, at 0 with it (no checkpoint)
    assert mamba_align.checkpoint_index(0, 5, 0, 4, 4, 4) == 0
    assert mamba_align.checkpoint_index(0, 5, 0, 4, 4, 4, eagle=True) is None


def test_retention_zero_keeps_eagles_two_replay_boundaries():
    # replay_boundaries(P, 4, use_eagle=True): (P - 1) // 4 * 4 - 4 and P // 4 * 4 - 4
    assert align_retention.replay_state_ends(22, 4, 1) == (20,)
    assert align_retention.replay_state_ends(22, 4, 1, eagle=True) == (16,)
    assert align_retention.replay_state_ends(24, 4, 2, eagle=True) == (16, 20)
    assert align_retention.replay_state_ends(5, 4, 4, eagle=True) == (0,)
    entries_of = {6: [(116, 1)]}   # block -> its (hash, group) entries
    entries = lambda block: entries_of.get(block, [])  # noqa: E731
    hashes = list(range(101, 125))  # one a token
    assert align_retention.replay_state_problem(24, 16, [0, 0, 0, 6], entries, hashes, 4, 1,
                                                eagle=True) is None
    assert "EAGLE's replay boundaries [16, 20]" in align_retention.replay_state_problem(
        24, 20, [0, 0, 0, 0, 9], entries, hashes, 4, 1, eagle=True)
    assert align_retention.replay_state_problem(24, 16, [0, 0, 0, 9], entries, hashes, 4,
                                                1) is None  # (without EAGLE only P - 1's, 20)
    # the scheduler's last cacheable position a block lower with the drop
    assert align_retention.scheduler_cut(22, 0, 22, 4, False) == 20
    assert align_retention.scheduler_cut(22, 0, 22, 4, False, eagle=True) == 16
    assert align_retention.scheduler_cut(22, 0, 22, 4, True, eagle=True) == 22


def test_the_profile_draws_eagle_last(monkeypatch):
    """Its traces with EAGLE off are those the profile made before the draw, and with it on
    the same but for it; never with lookahead hashes."""
    made, before = made_and_with_draw_off(monkeypatch, mamba_eagle, hybrid.MAMBA_ALIGN, 120)
    drawn = 0
    for index, trace in enumerate(made):
        drawn += trace.eagle
        assert not (trace.eagle and trace.hash_lookahead), index
        # (the shared-prefix checkpoint and multi-module MTP's prefill lookahead, drawn after
        # it for EAGLE traces only: test_mamba_shared_prefix.py, test_mamba_eagle_mtp.py)
        mtp = 0 if trace.eagle else trace.prefill_lookahead  # (none drawn with EAGLE before)
        # (hits reported, drawn last after all these: test_align_reported.py)
        assert replace(trace, eagle=False, mamba_shared_prefix=False, prefill_lookahead=mtp,
                       report=False) == replace(before[index], report=False), index
    assert 12 <= drawn <= 40, drawn  # a quarter of those without lookahead hashes


def _eagle_indices(count: int = FIRST) -> list[int]:
    found = [i for i in range(300) if hybrid.MAMBA_ALIGN.generate(0, i).eagle]
    return found[:count]


@_vllm
def test_the_profiles_eagle_traces_run_clean_reaching_each_piece():
    from kvfuzz.impl.kvmanager import RELEASED

    events = agreeing_features("kvmanager", TARGETS["kvmanager"].catalogue.resolve(RELEASED),
                               (hybrid.MAMBA_ALIGN.generate(0, i) for i in _eagle_indices()))
    assert events[align_eagle.HIT] and events[align_eagle.MOVED], events
    assert events[align_retention.WRITTEN] and events["config: EAGLE"] == FIRST, events


def _first_divergence(impl="vllm.kvmanager"):
    return next((found for found in (divergence("kvmanager", hybrid.MAMBA_ALIGN.generate(0, i),
                                                impl) for i in _eagle_indices()) if found),
                None)


@_vllm
def test_without_the_drop_in_the_hit_the_judge_is_wrong(monkeypatch):
    hybrid_hits = align_hit.hybrid_hits
    monkeypatch.setattr(align_hit, "hybrid_hits", lambda *args, eagle=False, **more:
                        hybrid_hits(*args[:5]))
    found = _first_divergence()
    assert found is not None and "prefix hit" in found.report(), found


@_vllm
def test_without_the_drop_in_the_checkpoint_the_judge_is_wrong(monkeypatch):
    without_align_caching_check(monkeypatch)  # (it reads the same rule: the kept states' here)
    position = mamba_align.checkpoint_position
    monkeypatch.setattr(mamba_align, "checkpoint_position",
                        lambda end, hash_size, lookahead=0, eagle=False:
                        position(end, hash_size, lookahead))
    found = _first_divergence()
    assert found is not None and "mamba states" in found.report(), found


@_vllm
def test_a_release_keeping_the_replay_boundary_without_eagle_is_caught(monkeypatch):
    """vLLM's coordinator asked for its replay boundaries without EAGLE (P - 1's alone): under
    retention 0 the state at EAGLE's boundary is not kept, which the rule names."""
    import sys

    from kvfuzz.impl.registry import load_attribute

    load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")  # (vLLM as kvfuzz loads it)
    kv_cache_coordinator = sys.modules["vllm.v1.core.kv_cache_coordinator"]
    boundaries = kv_cache_coordinator.replay_boundaries
    monkeypatch.setattr(kv_cache_coordinator, "replay_boundaries",
                        lambda prompt, block, use_eagle: boundaries(prompt, block, False))
    found = _first_divergence()
    assert found is not None and "retention" in found.report() and \
        "EAGLE's replay boundaries" in found.report(), found


@_vllm
def test_the_catalogue_mutant_of_the_eagle_checkpoint_is_caught(monkeypatch):
    """Caught, and by the kept-state check with the caching check (which sees its misplaced
    entry first) off."""
    mutant = "mutant.vllm.kvmanager.mamba_align_checkpoint_eagle_ignored"
    assert _first_divergence(mutant) is not None
    without_align_caching_check(monkeypatch)
    found = _first_divergence(mutant)
    assert found is not None and "mamba states" in found.report(), found


@_vllm
def test_mamba_mtp_with_eagles_drop_runs_guarded_and_replays(tmp_path):
    """MAMBA_EAGLE: MAMBA_MTP with EAGLE's drop on (lookahead hashes off: the scheduler passes
    `use_eagle`); sessions 0 and 1 guarded in the reduced mode, clean, the same as unguarded,
    recorded equal and replaying, the header's `eagle` read from the manager and the drop's
    hits and checkpoints reached."""
    from collections import Counter

    from tests.kvmanager.test_guard import clean_and_replaying

    events = Counter()
    for seed in (0, 1):
        guarded = clean_and_replaying(seed, "MAMBA_EAGLE", tmp_path).manager.kvfuzz_session
        assert guarded.header.eagle and not guarded.header.hash_lookahead
        assert guarded.header.mamba_speculative == 2
        events.update(guarded.lock.events)
    assert events[align_eagle.HIT] and events[align_eagle.MOVED], events
