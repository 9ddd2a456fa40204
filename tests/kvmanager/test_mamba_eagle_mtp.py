"""Multi-module MTP's prefill lookahead (k >= 2) with EAGLE's last-block drop beside a Mamba
"align" group (since 2026-12-07, `fuzz/kvmanager/align_eagle.py`): the hybrid coordinator's
`get_num_cacheable_tokens` holds k - 1 computed tokens back from caching in both groups, so a
state written at a block boundary is cached (and offered) by the step that finalizes it, the
partial tail a step keys sits at its cacheable tokens (its copy-on-write in the next count),
and chunks stop at the prompt's tail boundary as vLLM's scheduler stops them. The codec takes
k up to the hash unit (past it vLLM's scheduler stalls or its manager asserts:
docs/upstream-vllm.md), the "mamba align" profile draws it last; on the released vLLM its
traces run clean, the judge is wrong without the model, the catalogue's mutant is caught and
MAMBA_EAGLE_MTP runs guarded. The vLLM parts are slow."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.kvmanager import align_eagle, align_retention
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import hybrid, mamba_eagle
from kvfuzz.strategies.kvmanager.codec import from_json
from tests.helpers import TARGETS, agreeing_features, divergence, needs_engine


def _vllm(test):
    """The test marked as those that import vLLM are (slow; skipped without it)."""
    for mark in needs_engine("vllm"):
        test = mark(test)
    return test


FIRST = 3  # the profile's first MTP-with-EAGLE traces of seed 0 the release runs here


def _header(**more) -> dict:
    return {"format": "kvfuzz-kvmanager-trace/1", "blocks": 12, "block_size": 4, "window": 0,
            "max_model_len": 64, "mamba_mode": "align", "eagle": True,
            "ops": [{"op": "arrive", "rid": 1, "tokens": list(range(9))},
                    {"op": "schedule", "rid": 1, "chunk": 9}]} | more


def _trace(k: int, hashed: int = 4, **more):
    return SimpleNamespace(eagle=True, prefill_lookahead=k, block_size=4, hash_size=hashed,
                           hash_lookahead=0, mamba_checkpoint=0, **more)


def test_the_codec_takes_k_up_to_the_hash_unit_with_eagle():
    assert from_json(_header(prefill_lookahead=4)).prefill_lookahead == 4
    assert from_json(_header(hash_block_size=2, prefill_lookahead=2)).prefill_lookahead == 2
    with pytest.raises(FormatError, match="prefill_lookahead.*hash unit with EAGLE"):
        from_json(_header(hash_block_size=2, prefill_lookahead=3))
    # (without EAGLE no group holds tokens back: any k the other rules allow)
    assert from_json(_header(eagle=False, hash_block_size=2, prefill_lookahead=3))


def test_k_minus_one_held_back_with_the_drop_only():
    assert align_eagle.held_back(_trace(3)) == 2 and align_eagle.cacheable(_trace(3), 9) == 7
    without = SimpleNamespace(**(vars(_trace(3)) | {"eagle": False}))
    assert align_eagle.held_back(without) == 0 and align_eagle.cacheable(without, 9) == 8
    assert align_eagle.cacheable(_trace(1), 9) == 9
    # hashed per block: nothing cached below a block, then the finalized tokens
    assert align_eagle.cacheable(_trace(3), 3) == 0 and align_eagle.cacheable(_trace(3), 6) == 4


def test_a_state_is_judged_where_the_step_after_it_finalizes_it():
    ends = (4, 8)
    # k = 3: the state at 8 written by a step to 8, cached by the next that reaches 10
    assert align_eagle.finalized_end(_trace(3), 4, 8, ends) == 4  # (the state it reads)
    assert align_eagle.finalized_end(_trace(3), 0, 8, ends) is None
    assert align_eagle.finalized_end(_trace(3), 8, 9, ends) is None
    assert align_eagle.finalized_end(_trace(3), 8, 10, ends) == 8
    assert align_eagle.finalized_end(_trace(3), 9, 12, ends) is None  # (left the table)


def test_chunks_stop_at_the_prompts_tail_boundary_with_partial_hits():
    request = SimpleNamespace(prompt=10, tokens=list(range(10)))
    # hashed per 2, k = 2: the tail boundary 10 // 2 * 2 - 2 = 8, the last cacheable 4
    assert align_eagle.tail_cut(_trace(2, hashed=2), request, 0, 10) == 8
    assert align_eagle.tail_cut(_trace(2, hashed=2), request, 8, 2) == 2
    assert align_eagle.tail_cut(_trace(1, hashed=2), request, 0, 10) == 10  # (nothing held)
    assert align_eagle.tail_cut(_trace(2, hashed=4), request, 0, 10) == 10  # (no partial hits)


def test_the_profile_draws_mtp_last(monkeypatch):
    """Its traces without the draw are those the profile made before it; with it, EAGLE
    traces without the shared-prefix checkpoint, k from 2 to the hash unit (at most 4)."""
    made = [hybrid.MAMBA_ALIGN.generate(0, i) for i in range(150)]
    with monkeypatch.context() as patched:
        patched.setattr(mamba_eagle, "MTP_SHARE", 0.0)
        before = [hybrid.MAMBA_ALIGN.generate(0, i) for i in range(150)]
    drawn = 0
    for index, trace in enumerate(made):
        if trace.eagle and trace.prefill_lookahead >= 2:
            drawn += 1
            assert 2 <= trace.prefill_lookahead <= min(4, trace.hash_size), index
            assert not trace.mamba_shared_prefix, index
            trace = replace(trace, prefill_lookahead=0)
        # (hits reported, drawn after it: test_align_reported.py)
        assert replace(trace, report=False) == replace(before[index], report=False), index
    assert 4 <= drawn <= 20, drawn


def _mtp_indices(count: int = FIRST) -> list[int]:
    found = [i for i in range(300) if (t := hybrid.MAMBA_ALIGN.generate(0, i)).eagle and
             t.prefill_lookahead >= 2]
    return found[:count]


def _first_divergence(impl="vllm.kvmanager"):
    return next((found for found in (divergence("kvmanager", hybrid.MAMBA_ALIGN.generate(0, i),
                                                impl) for i in _mtp_indices()) if found),
                None)


@_vllm
def test_the_profiles_mtp_traces_run_clean():
    from kvfuzz.impl.kvmanager import RELEASED

    events = agreeing_features("kvmanager", TARGETS["kvmanager"].catalogue.resolve(RELEASED),
                               (hybrid.MAMBA_ALIGN.generate(0, i) for i in _mtp_indices()))
    assert events["config: multi-token prediction (prefill lookahead)"] == FIRST, events
    # (a replay state judged at the step that finalized it, `align_eagle.finalized_end`)
    assert events[align_retention.WRITTEN], events


@_vllm
def test_without_the_held_back_tokens_the_judge_is_wrong(monkeypatch):
    monkeypatch.setattr(align_eagle, "held_back", lambda trace: 0)
    assert _first_divergence() is not None


@_vllm
def test_the_catalogue_mutant_of_the_held_back_tokens_is_caught():
    found = _first_divergence("mutant.vllm.kvmanager.mamba_align_mtp_held_ignored")
    assert found is not None


@_vllm
def test_mamba_eagle_mtp_runs_guarded_and_replays(tmp_path):
    """MAMBA_EAGLE_MTP: MAMBA_EAGLE with 2 modules (k = 2, a token held back), hashed per
    block; session 0 guarded in the reduced mode, clean, the same as unguarded, every request
    finished, recorded equal and replaying, the header's prefill lookahead read."""
    from tests.kvmanager.test_guard import clean_and_replaying

    guarded = clean_and_replaying(0, "MAMBA_EAGLE_MTP", tmp_path).manager.kvfuzz_session
    assert guarded.header.eagle and guarded.header.prefill_lookahead == 2


@_vllm
def test_the_release_stalls_with_three_modules_at_a_block_boundary():
    """A finding (vLLM 0.33.0, 2026-12-07; docs/upstream-vllm.md): beside a Mamba "align" group
    hashed per block (4 tokens) with 3 MTP modules, lookahead hashes on or off, a request
    never ends its prefill: sessions 37 and 73 (and 5 with the drop) run their 5,000 steps with
    9 of 10 requests finished; with 2 modules every request finishes. (Session 5's: a 9-token
    prompt scheduled 0-4, then 4-6 (the chunk cut short), then nothing: from 6 every chunk
    stops at the next block boundary 8 (`_mamba_block_aligned_split`), within k of the
    prompt's end, where `_reserve_prefill_lookahead` backs it off to nothing, as read. Traced
    2026-12-07, the other two are the same: session 37's r2, a 13-token prompt admitted after
    a hit of 8 with 8-12 cut to 8-10, then stuck at 10 before 12; session 73's r6, a 9-token
    prompt 0-4, 4-6, stuck at 6, as session 5's.)"""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    workload = replace(vllm_scheduler.MAMBA_EAGLE_MTP, num_speculative=3)
    for lookahead_hashes in (True, False):
        run = vllm_scheduler.run_session(
            37, workload=replace(workload, lookahead_hashes=lookahead_hashes))
        assert (run.finished, run.requests, run.steps) == (9, 10, 5000), run
    run = vllm_scheduler.run_session(37, workload=vllm_scheduler.MAMBA_EAGLE_MTP)
    assert run.finished == run.requests == 10, run


@_vllm
def test_the_release_asserts_after_a_whole_prompt_past_its_tail_boundary(monkeypatch):
    """A finding (vLLM 0.33.0, 2026-12-07; docs/upstream-vllm.md): with a prefill checkpoint
    block (every released Mamba model has one; aligned to 1 token, as `MambaMixer2`'s) the
    scheduler exports the prompt's tail state through it and schedules a 16-token prompt hashed
    per token whole; with 3 modules (2 tokens held back) a decode's `cache_blocks` then keys
    the tail boundary (15) on the block holding the prompt's state, which the next decode's
    `remove_skipped_blocks` frees before its copy-on-write: `allocate_new_blocks` asserts
    `req_blocks[block_idx] is source_block` and the engine dies. With 2 modules it finishes.
    (The codec keeps k at most the hash unit, which never reaches it.)"""
    import traceback

    from kvfuzz.fuzz.kvmanager import vllm_workloads
    from tests.kvmanager.test_mtp_drop_livelock import _prefill_progress

    monkeypatch.setattr(vllm_workloads, "MAMBA_EAGLE",
                        replace(vllm_workloads.MAMBA_EAGLE, mamba_checkpoint=1))
    with pytest.raises(AssertionError) as raised:
        _prefill_progress(False, 16, 1, 3)
    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert frames[-1] == "allocate_new_blocks" and "allocate_slots" in frames, frames
    request, progress, _ = _prefill_progress(False, 16, 1, 2)
    assert request.is_finished() and progress[0] == 16, progress
