"""vLLM's spec-decode padded admission (`Schedule.pad`, `fuzz/kvmanager/padding.py`): a waiting
request whose hit leaves one token is admitted with `1 + num_spec_tokens` new tokens, placeholder
draft rows past its tokens. The op's field and its one-line refusals; the scheduler's rule on
worked cases; the oracle's side on a worked example (the rows get slots, none is cached); with
vLLM (slow), the guarded scheduler session that was refused before runs clean, and a guard that
reads its padded calls as the token alone is caught.
The mutant of the release that clamps the rows (`spec_pad_rows_clamped`) is caught in
`test_mutants.py` and by the corpus."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfuzz.fuzz.kvmanager.padding import padding, placeholder_rows
from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager.hashing import chain
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace, to_json
from tests.helpers import with_engine

with_vllm = with_engine("vllm")  # (the module's first tests need no vLLM)
# the corpus's killer of the mutant: a one-token prompt admitted with 2 placeholder rows,
# whose slots (with 2 of lookahead) reach a second block
KILLER = Trace(5, 4, 14, 1024, (Arrive(4, (3,)), Schedule(4, 10000, 2)), lookahead=2,
               hash_lookahead=1)


def test_the_field_round_trips_is_left_out_at_zero_and_bad_values_are_one_line_errors():
    assert codec.from_json(to_json(KILLER)) == KILLER
    plain = replace(KILLER, ops=(Arrive(4, (3,)), Schedule(4, 10000)))
    assert "pad" not in to_json(plain)["ops"][1]  # a file from before it reads as before
    for bad in (-1, codec.MAX_PAD + 1, "2"):
        data = to_json(KILLER)
        data["ops"][1]["pad"] = bad
        with pytest.raises(FormatError) as error:
            codec.from_json(data)
        assert "\n" not in str(error.value) and "ops[1].pad" in str(error.value)


def test_the_scheduler_pads_only_where_one_token_is_left_and_the_rows_fit():
    trace = replace(KILLER, max_model_len=20)
    assert placeholder_rows(trace, left=1, computed=8, chunk=3, pad=2) == 2
    assert placeholder_rows(trace, left=2, computed=8, chunk=3, pad=2) == 0  # a prefill chunk
    assert placeholder_rows(trace, left=1, computed=8, chunk=2, pad=2) == 0  # budget short
    assert placeholder_rows(trace, left=1, computed=17, chunk=3, pad=2) == 0  # 17 + 3 + 1 > 20
    assert placeholder_rows(trace, left=1, computed=17, chunk=3, pad=1) == 1  # 17 + 2 + 1 fits
    # asynchronous scheduling pads too (the scheduler's condition does not read it)
    assert placeholder_rows(replace(trace, async_scheduling=True), 1, 8, 3, 2) == 2
    # the guard's reading of a call of n new tokens: the rows, where the rule makes as many
    assert padding(trace, n=3, left=1, computed=8) == 2
    assert padding(trace, n=3, left=1, computed=17) == 0  # no padding there: a refusal
    assert padding(replace(trace, mamba_mode="align"), n=3, left=1, computed=8) == 0
    # a plain admission's beside a Mamba "align" group (through a connector too, or the first
    # step after a load, since 2026-12-07): the aligned split keeps all the rows or none
    # (`padding.py`); an admission with external tokens stays refused there (the guard asks
    # without `align`), and mode "none" or "all"
    assert padding(replace(trace, mamba_mode="align"), 3, 1, 8, align=True) == 2
    assert padding(replace(trace, mamba_mode="none"), 3, 1, 8, align=True) == 0


def test_the_oracle_gives_the_rows_slots_and_caches_none_of_them():
    """r1 computes and caches a block of 4 tokens; r2, those 4 and one more, hits the block
    and is admitted with 1 + 3 new tokens: slots to token 8 (a second block, the one token
    and the 3 placeholders), and only the hit block cached: the second is full of positions
    but holds one real token."""
    model = KVManagerModel(8, 4, 0, 64)
    first, second = [1, 2, 3, 4], [1, 2, 3, 4, 5]
    assert model.allocate_slots(1, chain(first, 4), 4, 0, 4, 0, [[]], tokens=first) == [[1]]
    blocks, hit, _ = model.get_computed_blocks(chain(second, 4), 5, second)
    assert hit == 4 and blocks == [[1]]
    fresh = model.allocate_slots(2, chain(second, 4), 5, 0, 1 + 3, hit, blocks,
                                 tokens=second)
    assert fresh == [[2]] and model.tables[0][2] == [1, 2]
    assert model.num_cached[0][2] == 1  # not 2: block 2's positions 5-7 are placeholders


@with_vllm
@pytest.mark.slow
def test_a_guard_that_maps_the_padded_call_to_the_token_alone_is_caught(monkeypatch, tmp_path):
    """The mapping is load-bearing: a padded admission read as a `schedule` without `pad` (the
    trace clamped to the token left, as before) is a lock step that admits 1 token where the
    engine asked 3: a `Mismatch` in the session."""
    import kvfuzz
    from kvfuzz.fuzz.kvmanager import guard_steps as guard  # (its allocation mapping)
    from tests.kvmanager.test_guard import scheduler_session

    monkeypatch.setattr(guard, "Schedule", lambda rid, chunk, pad=0, **_: Schedule(rid, chunk))
    with pytest.raises(kvfuzz.Mismatch):
        scheduler_session(4, None, tmp_path, workload="LOOKAHEAD_HASHES")


@with_vllm
@pytest.mark.slow
def test_the_session_with_padded_admissions_runs_guarded_clean_and_its_recording_replays(
        tmp_path):
    """vLLM's scheduler session 4 of `LOOKAHEAD_HASHES` (EAGLE, 2 draft tokens) pads
    admissions whose hit leaves one token (the guard refused it before): guarded clean, every
    request finished, its recording the same trace and kept in corpus/."""
    from pathlib import Path

    import kvfuzz
    from kvfuzz.fuzz.engine import corpus
    from kvfuzz.fuzz.targets import TARGETS
    from tests.conftest import CORPUS
    from tests.kvmanager.test_guard import scheduler_session

    run = scheduler_session(4, None, tmp_path, workload="LOOKAHEAD_HASHES")
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests, run
    padded = [op for op in guarded.ops if isinstance(op, Schedule) and op.pad]
    assert padded and all(op.pad == 2 and op.chunk == 3 for op in padded), padded
    recorded = scheduler_session(4, None, tmp_path, check=False,
                                 workload="LOOKAHEAD_HASHES").manager.kvfuzz_session.trace()
    assert recorded == guarded.trace()
    path = Path(CORPUS) / TARGETS["kvmanager"].file_name(recorded)
    assert path.exists() and corpus.load(path)[1] == recorded
    assert kvfuzz.replay(path, "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))
