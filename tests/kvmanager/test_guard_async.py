"""vLLM's asynchronous scheduler (`AsyncScheduler`) under the kvmanager guard
(fuzz/kvmanager/guard_async.py; the sessions: fuzz/kvmanager/vllm_async.py): step N+1 scheduled
before step N's output is processed, its calls mapped onto the trace's asynchronous ops
(`placeholder`, `processed`, a `stale` sample, `settle` of the processed tokens) and checked
in lock step. The released class runs clean and its recording replays; the two mutants of the
tokens in flight raise at their first bad call with a file that replays; a guard that drops
the `processed` op or a stale token is caught; tokens in flight the guard was not told of are
refused. The ops' JSON needs no vLLM."""

import pytest

import kvfuzz
from kvfuzz.fuzz.kvmanager.guard_async import AsyncCalls
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.trace import (Arrive, Placeholder, Processed, Sample, Settle,
                                               Trace, to_json)
from tests import guarding
from tests.helpers import with_engine

SEED = 0  # ASYNC's session 0: 2 preemptions with a stale token each, hits, window frees


def async_session(seed: int, name: str | None, corpus_dir, check: bool = True):
    from tests.kvmanager.test_guard import scheduler_session

    return scheduler_session(seed, name, corpus_dir, check, workload="ASYNC")


def test_the_asynchronous_ops_read_back_and_older_samples_read_as_before():
    ops = (Arrive(0, (5, 6, 7)), Placeholder(0), Sample(0, 9), Processed(0), Settle(0),
           Sample(0, 11, stale=True))
    trace = Trace(8, 4, 0, 64, ops, async_scheduling=True)
    data = to_json(trace)
    assert from_json(data) == trace
    assert data["ops"][1:4] == [{"op": "placeholder", "rid": 0},
                                {"op": "sample", "rid": 0, "token": 9},  # no "stale": false
                                {"op": "processed", "rid": 0}]
    assert data["ops"][5] == {"op": "sample", "rid": 0, "token": 11, "stale": True}


@with_engine("vllm")
def test_vllms_async_scheduler_runs_guarded_clean_and_its_record_replays(tmp_path):
    session = async_session(SEED, None, tmp_path)
    guarded = session.manager.kvfuzz_session
    assert session.finished == session.requests == 10 and session.preemptions, session
    assert guarded.divergence is None and guarded.header.async_scheduling
    ops = guarded.ops
    assert {Placeholder, Processed, Settle} <= {type(op) for op in ops}
    assert any(isinstance(op, Sample) and op.stale for op in ops)
    events = guarded.lock.events
    assert events["admission with a hit"] and events["window frees blocks with tokens in flight"]
    recorded = async_session(SEED, None, tmp_path, check=False).manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


@with_engine("vllm")
@pytest.mark.parametrize("name", ["in_flight_ignored", "window_moves_early"])
def test_a_mutant_of_the_tokens_in_flight_raises_with_a_file_that_replays(name, tmp_path):
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: async_session(seed, name, tmp_path), f"mutant.vllm.kvmanager.{name}",
        "vllm.kvmanager", seeds=1)


def forgets_processed(self, tracked, request):
    """A broken mapping: the step's output taken as processed, no `processed` op written."""
    if tracked.running and not request.num_in_flight_tokens:
        tracked.in_flight = 0
    return AsyncCalls._in_flight(self, tracked, request)


def drops_stale_tokens(self, tracked, request):
    """A broken mapping: a preempted request's stale token kept by the guard, not in the
    trace."""
    tokens = list(request.all_token_ids)
    if request.num_preemptions and not tracked.running and \
            len(tokens) == len(tracked.tokens) + 1:
        tracked.tokens.append(tokens[-1])


@with_engine("vllm")
@pytest.mark.parametrize("broken", [forgets_processed, drops_stale_tokens])
def test_a_guard_mapping_asynchronous_calls_wrongly_is_caught(broken, tmp_path, monkeypatch):
    from kvfuzz.fuzz.kvmanager.guard import GuardedManager

    name = "_in_flight" if broken is forgets_processed else "_stale"
    monkeypatch.setattr(GuardedManager, name, broken)
    with pytest.raises(kvfuzz.Mismatch):
        async_session(SEED, None, tmp_path)


@with_engine("vllm")
def test_tokens_in_flight_the_guard_was_not_told_of_are_refused(tmp_path):
    from tests.kvmanager.test_guard import guarded_arrival

    manager, guarded, request, blocks, hit = guarded_arrival(tmp_path, 9)
    guarded.allocate_slots(request, 8, hit, blocks)
    request.num_computed_tokens, request.num_in_flight_tokens = 8, 8
    free = manager.block_pool.get_num_free_blocks()
    with pytest.raises(kvfuzz.GuardUnsupported, match="8 tokens in flight .an asynchronous "
                                                      "scheduler"):
        guarded.allocate_slots(request, 1)
    assert manager.block_pool.get_num_free_blocks() == free  # never made
    # told: the previous allocation's 8 tokens in flight, or none; 3 is neither
    manager, guarded, request, blocks, hit = guarded_arrival(tmp_path, 9, async_scheduling=True)
    guarded.allocate_slots(request, 8, hit, blocks)
    request.num_computed_tokens, request.num_in_flight_tokens = 8, 3
    with pytest.raises(kvfuzz.GuardUnsupported, match="3 tokens in flight where the trace has "
                                                      "8"):
        guarded.allocate_slots(request, 1)


def chunks_with_an_output_between(tmp_path, **options):
    """Request 1 (30 tokens, a window of 8 over blocks of 4) admitted with 12 tokens, its next 8
    scheduled before that step's output, then both outputs processed before its third chunk
    (as `AsyncScheduler` has it when the request sat out a step): (the guard, its table)."""
    from tests.kvmanager.test_guard import guarded_arrival

    manager, guarded, request, blocks, hit = guarded_arrival(tmp_path, 30, 16, 8,
                                                             async_scheduling=True, **options)
    guarded.allocate_slots(request, 12, hit, blocks)
    request.num_computed_tokens, request.num_in_flight_tokens = 12, 12
    guarded.allocate_slots(request, 8)  # the first step still in flight
    request.num_computed_tokens, request.num_in_flight_tokens = 20, 0  # both processed
    guarded.allocate_slots(request, 8)
    return guarded, manager.get_block_ids(request.request_id)


@with_engine("vllm")
def test_an_output_processed_before_the_next_allocation_is_a_processed_op(tmp_path,
                                                                          monkeypatch):
    from kvfuzz.fuzz.kvmanager.guard import GuardedManager
    from kvfuzz.strategies.kvmanager.trace import Schedule

    guarded, tables = chunks_with_an_output_between(tmp_path)
    session = guarded.kvfuzz_session
    assert session.divergence is None
    assert session.ops[1:] == [Schedule(0, 12), Schedule(0, 8), Processed(0), Schedule(0, 8)]
    assert tables[1][:3] == [0, 0, 0]  # the window moved on all 20 tokens: nothing in flight
    monkeypatch.setattr(GuardedManager, "_in_flight", forgets_processed)
    with pytest.raises(kvfuzz.Mismatch, match="8 tokens, 0 in flight"):
        chunks_with_an_output_between(tmp_path / "broken")
