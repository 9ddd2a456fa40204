"""kvfuzz's fake KV connector beside a Mamba "align" group with multi-token prediction's drafts
(`vllm_workloads.MAMBA_MTP_CONNECTOR`, since 2026-12-07) under vLLM's synchronous scheduler:
the spec-decode padding of the first step after a load that left one token (a whole prompt
loaded) mapped to a `schedule` with `pad` and judged in the reduced mode over its rows
(`fuzz/kvmanager/align_external_pad.py`); sessions clean, the same as unguarded, recorded
equal and replaying; and of a plain admission through the connector (a preempted request
readmitted) to a `connect` with `pad`; each padded call mapped as the token alone caught, and
the reduced mode reading no `pad` (as before) caught; under vLLM's AsyncScheduler
(`MAMBA_ASYNC_MTP_CONNECTOR`) the rows held in flight to the output, a reduced mode rolling
them back at once caught. Skips without vLLM (slow tier)."""

import pytest

import kvfuzz
from tests.helpers import needs_engine
from tests.kvmanager.test_guard import clean_and_replaying, scheduler_session

pytestmark = needs_engine("vllm")  # (the slow tier)
WORKLOAD = "MAMBA_MTP_CONNECTOR"
# Session 5: r3's whole prompt loaded, its last token's step padded with 2 placeholder drafts
# (sessions 0-99: docs/upstream-vllm.md, "A padded admission beside the group")
PADDED = 5
# Session 38: r6 preempted, readmitted through the connector's lookup with its last token left
# after its hit, padded with 2 (and a padded step after a load, r8's)
READMITTED = 38


def test_a_padded_step_after_a_load_beside_the_group_runs_guarded_and_replays(tmp_path,
                                                                             monkeypatch):
    """vLLM pads the step (`allocate_slots(request, 1 + 2)`: one token left, a running request
    scheduled) and the aligned split keeps the rows; guarded, the step is a `schedule` with
    `pad` 2, the rows rolled back at once. Mapped as the token alone, the lock step's
    resumption is not the engine's call: caught."""
    from kvfuzz.fuzz.kvmanager import align_external_pad as pad, guard_connector
    from kvfuzz.strategies.kvmanager.trace import Schedule

    guarded = clean_and_replaying(PADDED, WORKLOAD, tmp_path).manager.kvfuzz_session
    assert guarded.header.mamba_mode == "align" and guarded.header.lookahead == 2
    assert [(op.rid, op.chunk, op.pad) for op in guarded.ops
            if isinstance(op, Schedule) and op.pad] == [(3, 3, 2)]
    assert guarded.lock.events[pad.PADDED_RESUMPTION] == 1, guarded.lock.events
    assert not list(tmp_path.glob("*.json"))

    def token_alone(rid, n, pad=0, **more):
        return Schedule(rid, n - pad, 0, **more)
    with monkeypatch.context() as patched:
        patched.setattr(guard_connector, "Schedule", token_alone)
        with pytest.raises(kvfuzz.Mismatch, match=r"resumes with \(3, 1,.*engine with \(3,"):
            scheduler_session(PADDED, None, tmp_path / "alone", workload=WORKLOAD)
    # the reduced mode reading no `pad` (as before 2026-12-07): its resumption is the token's
    monkeypatch.setattr(pad.AlignResumeLoaded, "_padded", lambda self, *args: 0, raising=False)
    with pytest.raises(kvfuzz.Mismatch, match=r"resumes with \(3, 1,.*engine with \(3,"):
        scheduler_session(PADDED, None, tmp_path / "blind", workload=WORKLOAD)


def test_a_padded_readmission_through_the_connector_runs_guarded_and_replays(tmp_path,
                                                                            monkeypatch):
    """The connector's lookup, no external tokens, one token left after the hit: vLLM pads
    the admission (the split keeps the rows of a request with output tokens); guarded, a
    `connect` with `pad` 2 that the reduced mode admits as its plain admission over the rows.
    Mapped as the token alone: caught."""
    from kvfuzz.fuzz.kvmanager import align_external_pad as pad, guard_connector
    from kvfuzz.strategies.kvmanager.connector_ops import Connect

    guarded = clean_and_replaying(READMITTED, WORKLOAD, tmp_path).manager.kvfuzz_session
    assert [(op.rid, op.chunk, op.external, op.pad) for op in guarded.ops
            if isinstance(op, Connect) and op.pad] == [(6, 3, 0, 2)]
    assert guarded.lock.events[pad.PADDED_ADMISSION] == 1, guarded.lock.events
    assert guarded.lock.events["admission padded beside a Mamba group"] == 1
    assert not list(tmp_path.glob("*.json"))

    def token_alone(rid, n, external=0, *more):  # (the lookup's op passes three)
        if len(more) < 4:
            return Connect(rid, n, external, *more)
        load, reserve, written, rows, *rest = more
        return Connect(rid, n - rows, external, load, reserve, written, 0, *rest)
    monkeypatch.setattr(guard_connector, "Connect", token_alone)
    with pytest.raises(kvfuzz.Mismatch, match=r"admits with \(6, 1,.*engine with \(3,"):
        scheduler_session(READMITTED, None, tmp_path / "alone", workload=WORKLOAD)


# Session 5 under vLLM's AsyncScheduler: r7's padded step after its load, r8's padded admission
# through the connector twice (the pool refused the first)
ASYNC = 5


def test_the_padded_rows_held_in_flight_under_async_scheduling(tmp_path, monkeypatch):
    """MAMBA_ASYNC_MTP_CONNECTOR: vLLM counts the padded rows computed and in flight until the
    step's output, whose `settle` rolls them back; guarded, both padded calls carry
    `rows_in_flight`. A reduced mode rolling them back at once is caught at the request's next
    step (its Mamba table judged a block short)."""
    from kvfuzz.fuzz.kvmanager import align_external_pad as pad
    from kvfuzz.strategies.kvmanager.connector_ops import Connect
    from kvfuzz.strategies.kvmanager.trace import Schedule

    workload = "MAMBA_ASYNC_MTP_CONNECTOR"
    guarded = clean_and_replaying(ASYNC, workload, tmp_path).manager.kvfuzz_session
    padded = [(type(op).__name__, op.rid, op.pad, op.rows_in_flight) for op in guarded.ops
              if isinstance(op, (Connect, Schedule)) and op.pad]
    assert padded == [("Schedule", 7, 2, True), ("Connect", 8, 2, True),
                      ("Connect", 8, 2, True)], padded
    assert not list(tmp_path.glob("*.json"))

    monkeypatch.setattr(pad.AlignResumeLoaded, "rows_held", lambda self, rows, asked: False,
                        raising=False)
    with pytest.raises(kvfuzz.Mismatch, match=r"mamba states: r7's Mamba table"):
        scheduler_session(ASYNC, None, tmp_path / "at_once", workload=workload)
