"""Draft tokens under vLLM's synchronous scheduler: the trace's `schedule` with `drafts` (the
request's last token and k drafts, `allocate_slots(request, 1 + k)` from `num_tokens - 1`,
nothing in flight; the output's accepted tokens `sample`s, its rejected drafts rolled back by
the `settle`), the "sync drafts" profile (`strategies/kvmanager/sync_drafts.py`) shaped as the
guard's `SPEC_DRAFTS` sessions, and the guard mapping those sessions (`guard.py` `_step`,
`guard_sync_drafts.py`). The released class runs the profile's traces clean
(`test_every_profile.py`); here: the op's JSON and the profile's shape (no vLLM), a catalogue
mutant caught at a draft step, and the guarded sessions (slow: vLLM)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.strategies.inputs import FieldReader
from kvfuzz.strategies.kvmanager import async_drafts, codec, sync_drafts
from kvfuzz.strategies.kvmanager.op_codec import read_op
from kvfuzz.strategies.kvmanager.trace import (Decode, Placeholder, Processed, Sample, Schedule,
                                               Settle, to_json)
from tests import guarding
from tests.helpers import divergence, with_engine


def test_a_schedules_drafts_are_written_only_where_it_has_some():
    """`drafts` is omitted at 0, so every file written before reads as it did (and writes the
    same bytes); a value past the trace's draft limit is a format error naming the field."""
    plain, drafted = Schedule(3, 1), Schedule(3, 3, drafts=2)
    trace = replace(sync_drafts.GENERATOR.generate(0, 0), ops=(plain, drafted))
    data = to_json(trace)
    assert data["ops"] == [{"op": "schedule", "rid": 3, "chunk": 1},
                           {"op": "schedule", "rid": 3, "chunk": 3, "drafts": 2}]
    assert codec.from_json(data).ops == (plain, drafted)
    with pytest.raises(Exception, match=r"ops\[0\]\.drafts"):
        read_op(FieldReader("test"), {"op": "schedule", "rid": 0, "chunk": 1,
                                      "drafts": codec.MAX_PAD + 1}, "ops[0]")


def _walk(trace) -> tuple[Counter, list[str]]:
    """What the trace does, and what the synchronous scheduler with k drafts never makes: a
    draft step of more than k drafts, or other than 1 + drafts tokens; an asynchronous op
    (`placeholder`, `processed`, a stale `sample`) or a `decode` (its outputs are `sample`s and
    a `settle`); a rejection past the drafts of the request's last step; an output without its
    `settle`."""
    made, problems, last, open_output = Counter(), [], {}, set()
    k = trace.lookahead
    if not k or trace.async_scheduling:
        problems.append("no draft slots, or asynchronous")
    for index, op in enumerate(trace.ops):
        if isinstance(op, (Placeholder, Processed, Decode)) or \
                isinstance(op, Sample) and op.stale:
            problems.append(f"op {index}: {type(op).__name__}")
        if isinstance(op, Schedule):
            last[op.rid] = op.drafts
            if op.drafts:
                made["draft step"] += 1
                made["fewer drafts than k"] += op.drafts < k
                if op.drafts > k or op.chunk != 1 + op.drafts:
                    problems.append(f"op {index}: {op.chunk} tokens with {op.drafts} drafts")
            made["padded admission"] += op.pad > 0
        if isinstance(op, Sample):
            open_output.add(op.rid)
        if isinstance(op, Settle):
            open_output.discard(op.rid)
            made["rejected drafts"] += op.rejected
            made["all accepted"] += op.rejected == 0 and last.get(op.rid, 0) > 0
            if op.rejected > last.get(op.rid, 0):
                problems.append(f"op {index}: {op.rejected} rejected after "
                                f"{last.get(op.rid, 0)} drafts")
        if not isinstance(op, (Sample, Settle)) and open_output:
            problems.append(f"op {index}: an output of r{sorted(open_output)} not cached")
            open_output.clear()
    return made, problems


def test_the_profiles_traces_are_the_synchronous_schedulers_with_drafts():
    traces = [sync_drafts.GENERATOR.generate(0, index) for index in range(30)]
    assert all(t.note == "profile sync drafts" for t in traces)
    made = Counter()
    for trace in traces:
        counts, problems = _walk(trace)
        assert problems == [], (trace.describe(), problems)
        made += counts
    assert all(made[name] for name in ("draft step", "fewer drafts than k", "padded admission",
                                       "rejected drafts", "all accepted")), made
    # EAGLE (lookahead hashes of one token, or the drop) and MTP (hashes and prefill lookahead
    # of k), as the guard's sessions configure them
    assert {(t.hash_lookahead == 1, t.eagle, t.prefill_lookahead == t.lookahead)
            for t in traces} >= {(True, False, False), (False, True, False),
                                 (False, False, True)}


def test_the_shape_check_fails_on_asynchronous_drafts_and_on_a_step_past_k():
    """The walk above can fail: "async drafts"' traces (placeholders in flight) are not the
    synchronous scheduler's, nor a draft step of k + 1 drafts, nor a rejection with no drafts
    before it."""
    assert _walk(async_drafts.GENERATOR.generate(0, 0))[1]
    trace = sync_drafts.GENERATOR.generate(0, 0)
    ops = list(trace.ops)
    step = next(i for i, op in enumerate(ops) if isinstance(op, Schedule) and op.drafts)
    ops[step] = replace(ops[step], drafts=trace.lookahead + 1, chunk=trace.lookahead + 2)
    assert _walk(replace(trace, ops=tuple(ops)))[1]
    ops = list(trace.ops)
    ops[step] = replace(ops[step], drafts=0, chunk=1)
    assert _walk(replace(trace, ops=tuple(ops)))[1]


# A catalogue mutant the draft step reaches, caught there on the profile's first trace: the
# manager counting the request's own tokens alone (`spec_pad_rows_clamped`: the draft slots past
# the last token clamped), and the lookahead slots left out
AT_DRAFTS = [("spec_pad_rows_clamped", "result"), ("lookahead_not_allocated", "result")]


@with_engine("vllm")
@pytest.mark.parametrize("name, label", AT_DRAFTS)
def test_a_mutant_the_draft_step_reaches_is_caught_there(name, label):
    trace = sync_drafts.GENERATOR.generate(0, 0)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, f"mutant.vllm.kvmanager.{name}")
    assert found is not None and found.what.startswith(label) and \
        "draft tokens (synchronous)" in found.what, found and found.report()


def session(seed: int, workload: str, tmp_path, name: str | None = None, check: bool = True):
    from tests.kvmanager.test_guard_structured import session as structured_session

    return structured_session(seed, workload, tmp_path, name, check)


WORKLOADS = ["SPEC_DRAFTS", "MTP_DRAFTS", "SPEC_STRUCTURED"]


@with_engine("vllm")
@pytest.mark.slow
@pytest.mark.parametrize("workload", WORKLOADS)
def test_synchronous_draft_sessions_run_guarded_clean_and_replay(workload, tmp_path):
    """Session 0 of each (EAGLE's 2 drafts, MTP's 3, EAGLE's filtered by grammars): clean, every
    request finished, the recording equal to the guarded trace, replaying clean; draft steps,
    rejections and all-accepted outputs among its ops."""
    ran = session(0, workload, tmp_path)
    guarded = ran.manager.kvfuzz_session
    assert guarded.divergence is None and ran.finished == ran.requests, ran
    recorded = session(0, workload, tmp_path, check=False).manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    made = _walk(recorded.trace())[0]
    assert made["draft step"] and made["rejected drafts"] and made["all accepted"], made
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


@with_engine("vllm")
@pytest.mark.slow
def test_a_mutant_of_the_draft_slots_raises_in_a_synchronous_draft_session(tmp_path):
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: session(seed, "SPEC_DRAFTS", tmp_path, "spec_pad_rows_clamped"),
        "mutant.vllm.kvmanager.spec_pad_rows_clamped", "vllm.kvmanager", seeds=2)


def forgets_the_rollback(self, tracked, request) -> int:
    """A broken mapping: the output's rejected drafts not rolled back."""
    return 0


def writes_no_drafts(rid, chunk, *more, drafts=0, **fields):
    """A broken mapping: the draft step written as a schedule of its tokens without drafts."""
    return Schedule(rid, chunk, *more, **fields)


@with_engine("vllm")
@pytest.mark.parametrize("broken, match", [(forgets_the_rollback, "the lock step caches"),
                                           (writes_no_drafts, "the lock step allocates with")])
def test_a_guard_mapping_synchronous_drafts_wrongly_is_caught(broken, match, tmp_path,
                                                              monkeypatch):
    from kvfuzz.fuzz.kvmanager import guard_steps as guard  # (its allocation mapping)
    from kvfuzz.fuzz.kvmanager.guard import GuardedManager

    if broken is forgets_the_rollback:
        monkeypatch.setattr(GuardedManager, "_rejected", broken)
    else:
        monkeypatch.setattr(guard, "Schedule", broken)
    with pytest.raises(kvfuzz.Mismatch, match=match):
        session(0, "SPEC_DRAFTS", tmp_path)
