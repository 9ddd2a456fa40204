"""Lookahead hashes beside a Mamba "align" group (`Trace.hash_lookahead` with `mamba_mode`
"align", `fuzz/kvmanager/align_lookahead.py`): the codec takes them (not with a connector's
ops: vLLM keeps the legacy hashes with a connector), the "mamba align" profile draws them last
(its other traces as before), the checkpoint moves back by the lookahead; on the released vLLM
the profile's lookahead traces run clean and reach hits and moved checkpoints, and each piece of
the model is needed there (without it the judge is wrong); the catalogue's mutant is caught;
MAMBA_MTP with vLLM's default lookahead hashes runs guarded. The vLLM parts are slow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfuzz.fuzz.kvmanager import align_lookahead, boundary
from kvfuzz.oracle.kvmanager import mamba_align
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import hybrid
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.sources import TraceGenerator
from tests.helpers import (TARGETS, agreeing_features, divergence, needs_engine,
                           without_align_caching_check)

def _vllm(test):
    """The test marked as those that import vLLM are (slow; skipped without it)."""
    for mark in needs_engine("vllm"):
        test = mark(test)
    return test


# the first lookahead traces of the profile's seed 0 (indices), the released class's clean run
FIRST = 12


def _header(**more) -> dict:
    return {"format": "kvfuzz-kvmanager-trace/1", "blocks": 12, "block_size": 4, "window": 0,
            "max_model_len": 64, "mamba_mode": "align", "hash_lookahead": 2,
            "ops": [{"op": "arrive", "rid": 1, "tokens": list(range(9))},
                    {"op": "schedule", "rid": 1, "chunk": 9}]} | more


def test_the_codec_takes_lookahead_hashes_beside_an_align_group_without_a_connector():
    assert from_json(_header()).hash_lookahead == 2
    assert from_json(_header(hash_block_size=2)).hash_lookahead == 2  # per hash block
    with pytest.raises(FormatError, match="hash_lookahead.*caching off"):  # (modes none, all)
        from_json(_header(mamba_mode="none", caching=False))
    connect = {"op": "connect", "rid": 1, "chunk": 9, "external": 4}
    data = _header()
    data["ops"] = data["ops"][:1] + [connect] + data["ops"][1:]
    with pytest.raises(FormatError, match="hash_lookahead.*connect: vLLM keeps the legacy"):
        from_json(data)
    assert from_json(data | {"hash_lookahead": 0}).hash_lookahead == 0  # (the op is valid)
    # multi-module MTP's prefill lookahead beside it too (no EAGLE group holds tokens back)
    assert from_json(_header(prefill_lookahead=3)).prefill_lookahead == 3
    with pytest.raises(FormatError, match="prefill_lookahead"):
        from_json(_header(mamba_mode="all", caching=False, hash_lookahead=0,
                          prefill_lookahead=2))


def test_the_checkpoint_moves_back_by_the_lookahead():
    # get_mamba_prefill_checkpoint_position: end - max(1, lookahead), cut to the hash grid
    assert mamba_align.checkpoint_position(13, 4) == mamba_align.checkpoint_position(13, 4, 1) \
        == 12
    assert mamba_align.checkpoint_position(13, 4, 2) == 8
    assert mamba_align.checkpoint_position(13, 2, 3) == 10
    assert mamba_align.checkpoint_position(2, 2, 3) == 0
    # a chunk [0, 13) in blocks of 4 aligned to 1: its checkpoint column 2, valid either way
    assert mamba_align.checkpoint_index(0, 13, 0, 4, 4, 1) == 2
    assert mamba_align.checkpoint_index(0, 13, 0, 4, 4, 1, 2) == 2
    # aligned to 12: at 12 valid, at 8 (moved back) not
    assert mamba_align.checkpoint_index(0, 13, 0, 4, 4, 12) == 2
    assert mamba_align.checkpoint_index(0, 13, 0, 4, 4, 12, 2) is None


def test_a_checkpoint_keyed_a_block_below_its_column_need_not_be_offered():
    # the column of 8 tokens in blocks of 4 is 1 (block 3); block 5 keyed at 8 is a checkpoint
    assert boundary._checkpoint_below(5, 8, [0, 3, 5, 6], 4, 2)
    assert not boundary._checkpoint_below(3, 8, [0, 3, 5, 6], 4, 2)
    assert not boundary._checkpoint_below(5, 8, [0, 3, 5, 6], 4, 0)  # without lookahead: judged


def test_the_profile_draws_lookahead_hashes_last():
    """Its traces with them off are the layout's, and with them on the layout's but for them
    (and MTP's prefill lookahead of as many tokens in half of those)."""
    layout = TraceGenerator(hybrid.MAMBA_ALIGN.name, hybrid.build_mamba_align, 200, 200)
    drawn, prefill = 0, 0
    for index in range(120):
        trace = hybrid.MAMBA_ALIGN.generate(0, index)
        drawn += bool(trace.hash_lookahead)
        # (multi-module MTP with EAGLE's drop, drawn last: test_mamba_eagle_mtp.py)
        mtp = trace.eagle and trace.prefill_lookahead >= 2
        prefill += bool(trace.prefill_lookahead) and not mtp
        if trace.async_scheduling:  # (tokens in flight, drawn after these: test_mamba_async.py)
            assert not trace.hash_lookahead, index
            continue
        assert trace.prefill_lookahead in (0, trace.hash_lookahead) or mtp, index
        # (EAGLE's drop, then KV events and stats, then the shared-prefix checkpoint, drawn
        # after these: test_mamba_eagle.py, test_align_events.py, test_mamba_shared_prefix.py)
        assert not (trace.eagle and trace.hash_lookahead), index
        # (and hits reported, drawn last: test_align_reported.py)
        assert replace(trace, hash_lookahead=0, prefill_lookahead=0, eagle=False, events=False,
                       stats=False, mamba_shared_prefix=False, report=False) == \
            layout.generate(0, index), index
    assert 12 <= drawn <= 36 and 0 < prefill < drawn, (drawn, prefill)  # a fifth, half


def _lookahead_indices(count: int = FIRST) -> list[int]:
    found = [i for i in range(200) if hybrid.MAMBA_ALIGN.generate(0, i).hash_lookahead]
    return found[:count]


@_vllm
def test_the_profiles_lookahead_traces_run_clean_reaching_hits_and_moved_checkpoints():
    from kvfuzz.impl.kvmanager import RELEASED

    events = agreeing_features("kvmanager", TARGETS["kvmanager"].catalogue.resolve(RELEASED),
                               (hybrid.MAMBA_ALIGN.generate(0, i) for i in _lookahead_indices()))
    assert events[align_lookahead.HIT] and events[align_lookahead.MOVED], events
    assert events["config: lookahead hashing"] == FIRST


def _first_divergence(impl="vllm.kvmanager"):
    return next((found for found in (divergence("kvmanager", hybrid.MAMBA_ALIGN.generate(0, i),
                                                impl) for i in _lookahead_indices()) if found),
                None)


@_vllm
def test_without_the_lookahead_in_the_checkpoint_the_judge_is_wrong(monkeypatch):
    without_align_caching_check(monkeypatch)  # (it reads the same rule: the kept states' here)
    position = mamba_align.checkpoint_position
    monkeypatch.setattr(mamba_align, "checkpoint_position",
                        lambda end, hash_size, lookahead=0, eagle=False:
                        position(end, hash_size))
    found = _first_divergence()
    assert found is not None and "mamba states" in found.report(), found


@_vllm
def test_without_the_lookahead_in_the_hashes_the_judge_is_wrong(monkeypatch):
    from kvfuzz.fuzz.kvmanager.lock_request import _Request

    hashes = _Request.hashes
    monkeypatch.setattr(_Request, "hashes", lambda self, size, lookahead=0: hashes(self, size))
    found = _first_divergence()
    assert found is not None and "boundary offload" in found.report(), found


@_vllm
def test_the_catalogue_mutant_of_the_lookahead_checkpoint_is_caught(monkeypatch):
    """Caught, and with the caching check (which sees its misplaced entry first) off, by the
    kept-state check or the release's own assertion past the request's hashes."""
    mutant = "mutant.vllm.kvmanager.mamba_align_checkpoint_lookahead_ignored"
    assert _first_divergence(mutant) is not None, "not caught"
    without_align_caching_check(monkeypatch)
    found = _first_divergence(mutant)
    assert found is not None and ("mamba states" in found.report()
                                  or "num_hash_blocks" in found.report()), found


@_vllm
def test_mamba_mtp_with_vllms_default_lookahead_hashes_runs_guarded_and_replays(tmp_path):
    """MAMBA_MTP_HASHES: MAMBA_MTP with lookahead hashes on (one MTP module: 1 token), EAGLE's
    drop then cleared; session 0 guarded in the reduced mode, recorded, replayed clean."""
    import kvfuzz

    from tests.kvmanager.test_guard import scheduler_session

    session = scheduler_session(0, None, tmp_path, workload="MAMBA_MTP_HASHES")
    guarded = session.manager.kvfuzz_session
    assert session.finished == session.requests == 10, session
    assert guarded.divergence is None and guarded.header.hash_lookahead == 1
    assert guarded.header.mamba_speculative == 2 and not guarded.header.eagle
    assert guarded.lock.events["synchronous step with draft tokens"] > 50
    recorded = scheduler_session(0, None, tmp_path, False,
                                 "MAMBA_MTP_HASHES").manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


@_vllm
def test_vllms_default_multi_module_mtp_beside_the_group_runs_guarded_and_replays(tmp_path):
    """MAMBA_MTP_MODULES: vLLM's default MTP config of 2 modules (prefill lookahead 2, lookahead
    hashes of 2 tokens); session 0 guarded in the reduced mode, recorded, replayed clean."""
    import kvfuzz

    from tests.kvmanager.test_guard import scheduler_session

    session = scheduler_session(0, None, tmp_path, workload="MAMBA_MTP_MODULES")
    guarded = session.manager.kvfuzz_session
    assert session.finished == session.requests == 10, session
    header = guarded.header
    assert guarded.divergence is None and (header.hash_lookahead, header.prefill_lookahead,
                                           header.mamba_speculative) == (2, 2, 2), header
    recorded = scheduler_session(0, None, tmp_path, False,
                                 "MAMBA_MTP_MODULES").manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))
