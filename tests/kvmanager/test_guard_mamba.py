"""The kvmanager guard over a Mamba "align" group under vLLM's own scheduler
(fuzz/kvmanager/guard_mamba.py, `vllm_workloads.MAMBA_ALIGN`): the header reads the group as the
generator's "mamba align" traces hold it; the sessions run guarded clean in the reduced mode
(fuzz/kvmanager/align.py), their recordings replay clean on `vllm.kvmanager`; an admission vLLM
defers to the next step is no op (without that mapping the judge sees a needless refusal); the
live driver's reads of the hand-offs are judged; catalogue mutants of the Mamba group are
caught in a session with a file that replays. Skips without vLLM (slow tier)."""

import pytest

import kvfuzz
from tests import guarding
from tests.helpers import needs_engine
from tests.kvmanager.test_guard import scheduler_session

pytestmark = needs_engine("vllm")
# Seed 0 has a same-step deferral and a preemption (sessions 0-99: 71 and 105 in all)
SEEDS = 2
# MAMBA_PARTIAL's sessions with a partial hit inside a block and a copy-on-write copy
PARTIAL_SEEDS = 2
# The catalogue's Mamba "align" mutants these sessions reach (the others need retention 0,
# draft tokens or partial hits: docs/upstream-vllm.md)
MUTANTS = ("mamba_align_hit_short", "mamba_align_state_kept", "mamba_align_checkpoint_not_taken")
# and those MAMBA_MTP's reach (multi-token prediction's drafts: speculative Mamba blocks), and
# MAMBA_PARTIAL's (partial hits)
MTP_MUTANTS = ("mamba_align_speculative_dropped", "mamba_align_lookahead_state")
PARTIAL_MUTANTS = ("mamba_align_partial_hit_ignored",)


def mamba_session(seed: int, name: str | None, corpus_dir, check: bool = True,
                  workload: str = "MAMBA_ALIGN"):
    return scheduler_session(seed, name, corpus_dir, check, workload=workload)


def test_the_header_reads_the_mamba_group_as_the_generators_traces_hold_it(tmp_path):
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver

    from tests.kvmanager.test_guard import VLLM

    manager = KVManagerDriver(VLLM.load(), 16, 4, 0, 64, mamba_mode="align",
                              mamba_checkpoint=2).manager
    header = kvfuzz.guard(manager, "kvmanager", corpus=tmp_path).kvfuzz_session.header
    assert (header.mamba_mode, header.mamba_checkpoint, header.window) == ("align", 2, 0)
    # Mamba's zeroing records (needs_kv_cache_zeroing) are not the trace's zeroing
    assert manager.kv_cache_config.needs_kv_cache_zeroing and not header.zeroing
    # partial hits (a hash block below the block size, MAMBA_PARTIAL): read, not refused
    partial = KVManagerDriver(VLLM.load(), 16, 4, 0, 64, mamba_mode="align",
                              hash_block_size=2).manager
    assert kvfuzz.guard(partial, "kvmanager",
                        corpus=tmp_path).kvfuzz_session.header.hash_block_size == 2
    # multi-token prediction's speculative Mamba blocks: read, not refused (MAMBA_MTP)
    speculative = KVManagerDriver(VLLM.load(), 16, 4, 0, 64, mamba_mode="align",
                                  mamba_speculative=2).manager
    assert kvfuzz.guard(speculative, "kvmanager",
                        corpus=tmp_path).kvfuzz_session.header.mamba_speculative == 2
    refused = {
        "none": (dict(mamba_mode="none", caching=False), r"KV-cache groups \['FullAttentionSp")}
    for why, (settings, message) in refused.items():
        other = KVManagerDriver(VLLM.load(), 16, 4, 0, 64, **settings).manager
        with pytest.raises(kvfuzz.GuardUnsupported, match=message):
            kvfuzz.guard(other, "kvmanager", corpus=tmp_path)


def test_vllms_scheduler_with_a_mamba_align_group_runs_guarded_and_replays(tmp_path):
    deferred = preempted = 0
    for seed in range(SEEDS):
        session = mamba_session(seed, None, tmp_path)
        guarded = session.manager.kvfuzz_session
        assert session.finished == session.requests == 10, session
        assert guarded.divergence is None and guarded.header.mamba_mode == "align"
        assert guarded.lock.events["boundary states offered"] > 50, guarded.lock.events
        deferred += vars(session.manager).get("kvfuzz_deferrals", 0)
        preempted += session.preemptions
        recorded = mamba_session(seed, None, tmp_path, check=False).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert deferred and preempted, (deferred, preempted)
    assert not list(tmp_path.glob("*.json"))


def test_without_the_deferral_mapping_the_judge_sees_a_needless_refusal(tmp_path, monkeypatch):
    """vLLM's own deferral, made as an op: kvfuzz's trace has every op a step, where no hit is
    on a state of the same step, so the reduced mode calls the refusal needless."""
    from kvfuzz.fuzz.kvmanager.guard_mamba import SameStepDeferral

    monkeypatch.setattr(SameStepDeferral, "_same_step_deferral", lambda *args: None)
    with pytest.raises(kvfuzz.Mismatch, match=r"(?s)refusal.*allocate_slots refused an "
                                              r"admission.*is not deferred"):
        mamba_session(0, None, tmp_path)


def test_a_live_driver_that_hides_the_hand_offs_is_caught(tmp_path, monkeypatch):
    """The boundary-state hand-offs are read from the live manager without being taken (the
    scheduler drains them): a read that shows none fails the reduced mode's completeness."""
    from kvfuzz.impl.kvmanager.live_align import AlignStepReads

    monkeypatch.setattr(AlignStepReads, "boundary_offloads", lambda self: [])
    with pytest.raises(kvfuzz.Mismatch, match=r"boundary offload"):
        mamba_session(0, None, tmp_path)


@pytest.mark.parametrize("name", MUTANTS)
def test_a_mamba_align_mutant_raises_in_vllms_scheduler_with_a_file_that_replays(name, tmp_path):
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: mamba_session(seed, name, tmp_path), f"mutant.vllm.kvmanager.{name}",
        "vllm.kvmanager", seeds=SEEDS)


def test_the_corpus_holds_session_0_recorded_which_kills_the_mamba_mutants():
    """corpus/ keeps session 0 recorded (a same-step deferral absorbed, a preemption; 242 ops): what the
    scheduler records now, clean on the release, each Mamba mutant above killed by its
    replay (kvfuzz's own driver making the scheduler's calls)."""
    from pathlib import Path

    from kvfuzz.fuzz.engine import corpus
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import recording
    from kvfuzz.fuzz.targets import TARGETS
    from tests.conftest import CORPUS

    trace = recording(0, "kvmanager", workload="MAMBA_ALIGN")
    path = Path(CORPUS) / TARGETS["kvmanager"].file_name(trace)
    assert path.exists(), "regenerate it: kvfuzz.fuzz.engine.corpus.save(TARGETS['kvmanager'], " \
                          "recording(0, 'kvmanager', workload='MAMBA_ALIGN'), 'corpus')"
    assert corpus.load(path)[1] == trace
    assert kvfuzz.replay(path, "vllm.kvmanager").ok
    for name in MUTANTS:
        assert not kvfuzz.replay(path, f"mutant.vllm.kvmanager.{name}").ok, name


def test_multi_token_predictions_drafts_beside_the_group_run_guarded_and_replay(tmp_path):
    """MAMBA_MTP: the synchronous scheduler's draft steps beside a Mamba group with 2
    speculative blocks, rejected drafts rolled back at each output (`align_drafts.py`)."""
    session = mamba_session(0, None, tmp_path, workload="MAMBA_MTP")
    guarded = session.manager.kvfuzz_session
    assert session.finished == session.requests == 10, session
    assert guarded.divergence is None and guarded.header.mamba_speculative == 2
    events = guarded.lock.events
    assert events["synchronous step with draft tokens"] > 50, events
    assert events["Mamba align: drafts rolled back at a settle"] > 30, events
    recorded = mamba_session(0, None, tmp_path, False, "MAMBA_MTP").manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


def test_without_the_draft_steps_table_after_a_rollback_the_judge_sees_a_wrong_table(
        tmp_path, monkeypatch):
    """vLLM keeps a Mamba table as the draft step allocated it after rejected drafts roll the
    request back; judged against the rolled-back count instead, the table is a block long."""
    from kvfuzz.fuzz.kvmanager import align_pool

    monkeypatch.setattr(align_pool.AlignPoolChecks, "_kept_problems", _rolled_back_count)
    with pytest.raises(kvfuzz.Mismatch, match=r"mamba states: r\d+'s Mamba table \d+ blocks "
                                              r"after \d+ computed tokens"):
        mamba_session(0, None, tmp_path, workload="MAMBA_MTP")


def _rolled_back_count(self, rid, request, tables):
    from kvfuzz.oracle.kvmanager import mamba_align

    from kvfuzz.fuzz.kvmanager.lock_request import RUNNING

    if request.status != RUNNING or len(tables) != 2:
        return []
    wrong = mamba_align.table_problems(tables[1], self.read_from[rid], request.computed,
                                       self.trace.block_size, self.checkpoints.get(rid),
                                       self.trace.mamba_speculative)
    return [("mamba states", f"r{rid}'s Mamba table {wrong}")] if wrong else []


@pytest.mark.parametrize("name,workload", [(name, "MAMBA_MTP") for name in MTP_MUTANTS] +
                         [(name, "MAMBA_PARTIAL") for name in PARTIAL_MUTANTS])
def test_a_speculative_or_partial_hit_mutant_raises_with_a_file_that_replays(name, workload,
                                                                            tmp_path):
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: mamba_session(seed, name, tmp_path, workload=workload),
        f"mutant.vllm.kvmanager.{name}", "vllm.kvmanager", seeds=SEEDS)


def test_partial_hits_and_their_copies_run_guarded_and_replay(tmp_path):
    """MAMBA_PARTIAL (hashed per 2 tokens of 4): partial hits, each copy's endpoints freed by
    the scheduler at its step's end through `block_pool.free_blocks` (no op: the trace's lock
    step frees them after the op that made the copy, `CopyRetentions`)."""
    copies = partial = 0
    for seed in range(PARTIAL_SEEDS):
        session = mamba_session(seed, None, tmp_path, workload="MAMBA_PARTIAL")
        guarded = session.manager.kvfuzz_session
        assert session.finished == session.requests == 10, session
        assert guarded.divergence is None and guarded.header.hash_block_size == 2
        copies += guarded.lock.events["copy-on-write copies taken"]
        partial += guarded.lock.events["partial hit: inside a block"]
        recorded = mamba_session(seed, None, tmp_path, False, "MAMBA_PARTIAL")
        assert recorded.manager.kvfuzz_session.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.manager.kvfuzz_session.save(tmp_path / "recorded"),
                             "vllm.kvmanager").ok
    assert copies and partial, (copies, partial)
    assert not list(tmp_path.glob("*.json"))


def test_without_the_copies_mapping_the_retentions_free_is_refused_or_misjudged(
        tmp_path, monkeypatch):
    """The scheduler's free of a copy's endpoints, not recognised, is a pool free the trace has
    no op for (refused by name); the endpoints' references, not counted held until it, are
    reference counts the live tables do not explain."""
    from kvfuzz.fuzz.kvmanager.guard_mamba import CopyRetentions
    from kvfuzz.impl.kvmanager.live_align import AlignStepReads

    with monkeypatch.context() as patched:
        patched.setattr(CopyRetentions, "_retention_freed", lambda self, blocks: False)
        with pytest.raises(kvfuzz.GuardUnsupported, match=r"block_pool.free_blocks of \d+ "
                                                          r"blocks that are not a deferred"):
            for seed in range(PARTIAL_SEEDS):
                mamba_session(seed, None, tmp_path, workload="MAMBA_PARTIAL")
    monkeypatch.setattr(AlignStepReads, "copies_retained", lambda self: [])
    with pytest.raises(kvfuzz.Mismatch, match=r"reference counts against the live tables"):
        for seed in range(PARTIAL_SEEDS):
            mamba_session(seed, None, tmp_path, workload="MAMBA_PARTIAL")


def test_more_than_one_prefill_checkpoint_block_runs_as_the_traces_one(tmp_path):
    """vLLM's manager and scheduler read `num_prefill_checkpoint_blocks` only as "> 0": a group
    of 3 runs guarded clean, its session the very trace of the group of 1 (the guard refused
    it by name before 2026-12-06)."""
    from dataclasses import replace

    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    def guarded(workload):
        session = vllm_scheduler.run_session(
            0, lambda manager, **settings: kvfuzz.guard(manager, "kvmanager", **settings,
                                                        corpus=tmp_path), workload=workload)
        return session.manager.kvfuzz_session

    three = replace(vllm_scheduler.MAMBA_ALIGN, mamba_checkpoint_blocks=3)
    many, one = guarded(three), guarded(vllm_scheduler.MAMBA_ALIGN)
    assert many.divergence is None and many.header.mamba_checkpoint == 4
    assert many.trace() == one.trace()
    assert not list(tmp_path.glob("*.json"))


def test_a_padded_admission_beside_the_group_runs_guarded_and_replays(tmp_path, monkeypatch):
    """MAMBA_MTP's seed 70: a preempted request readmitted with one token left after its hit of
    40, padded by the scheduler with 2 placeholder drafts (`pad_spec_decode`; the aligned split
    keeps the rows of a request with output tokens: `padding.py`), mapped to a `schedule` with
    `pad` and judged in the reduced mode over its 3 rows. Mapped as the token alone, the lock
    step's allocation is not the engine's: caught."""
    from kvfuzz.fuzz.kvmanager import guard_steps
    from kvfuzz.strategies.kvmanager.trace import Schedule

    session = mamba_session(70, None, tmp_path, workload="MAMBA_MTP")
    guarded = session.manager.kvfuzz_session
    assert session.finished == session.requests == 10, session
    assert guarded.divergence is None
    assert guarded.lock.events["admission padded beside a Mamba group"] == 2, guarded.lock.events
    assert [op.pad for op in guarded.ops if isinstance(op, Schedule) and op.pad] == [2, 2]
    recorded = mamba_session(70, None, tmp_path, False, "MAMBA_MTP").manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))

    def token_alone(rid, n, pad=0, **more):
        return Schedule(rid, n - pad, 0, **more)
    monkeypatch.setattr(guard_steps, "Schedule", token_alone)
    with pytest.raises(kvfuzz.Mismatch, match=r"allocate_slots\(r\d+, 1, hit \d+\)"):
        mamba_session(70, None, tmp_path / "alone", workload="MAMBA_MTP")
