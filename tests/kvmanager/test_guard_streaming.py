"""vLLM's resumable (streaming-input) requests under its own Scheduler, the manager guarded
(`Workload(streaming=share)`: fuzz/kvmanager/vllm_streaming.py, guard_streaming.py; the trace's
`stream` op and its rule, fuzz/kvmanager/streaming.py). The released class runs clean and its
recording replays; a manager that skips the whole-request check where a request resumes with
its blocks (as every streaming update's resumption does) is caught, with a file that replays,
where a session without streaming input cannot catch it; a guard that writes an update short
is caught; a scheduler keeping a hash its update should cut, and what the trace does not say
yet, are refused by name. With EAGLE's drafts and lookahead hashes (synchronous): a session
clean and its recording replaying, a lock step that rehashes a stopped request caught, one
that never rehashes it at its lookup after a preemption caught (blocks of 4 tokens), a
scheduler cutting the hash its lookahead kept refused; with them under the asynchronous
scheduler, a session clean and replaying. Under vLLM's asynchronous scheduler, a session
clean with the stops' `discard` and its recording replaying, and a guard dropping `discard`
caught. The op's JSON round trip needs no vLLM. One short session each (vLLM's import
dominates)."""

import functools
import inspect
from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager.describe import describe_op
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import Arrive, Finish, Schedule, Trace, to_json
from tests import guarding
from tests.helpers import with_engine

with_vllm = with_engine("vllm")  # (the codec test needs no vLLM)

SEED = 1  # 14 updates (3 taken after a wait, 11 at the stop), 17 resumptions, 5 preemptions
BROKEN = f"{__name__}:WholeCheckSkippedOnResumption"


def session(seed: int, tmp_path, manager_class=None, check: bool = True, impl=None,
            named: str = "STREAMING", **workload):
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    wrap = kvfuzz.guard if check else kvfuzz.record
    options = dict(corpus=tmp_path, **({"impl": impl} if impl else {})) if check else {}
    return vllm_scheduler.run_session(
        seed, lambda manager, **settings: wrap(manager, "kvmanager", **settings, **options),
        workload=replace(getattr(vllm_scheduler, named), **workload),
        manager_class=manager_class)


@functools.cache
def doubles() -> dict:
    """The released class with its whole-request check (`full_sequence_must_fit`) skipped for
    a request that holds computed tokens: it admits a resumption whose whole sequence does not
    fit (built on first use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")
    released = KVCacheManager.allocate_slots
    signature = inspect.signature(released)

    class WholeCheckSkippedOnResumption(KVCacheManager):
        @functools.wraps(released)  # (its parameters, as the guard reads them)
        def allocate_slots(self, *args, **kwargs):
            bound = signature.bind(self, *args, **kwargs)
            if bound.arguments["request"].num_computed_tokens:
                bound.arguments["full_sequence_must_fit"] = False
            return released(*bound.args, **bound.kwargs)
    return {"WholeCheckSkippedOnResumption": WholeCheckSkippedOnResumption}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_guard_streaming:...
    if name == "WholeCheckSkippedOnResumption":
        return doubles()[name]
    raise AttributeError(name)


@with_vllm
def test_the_released_manager_runs_clean_with_streaming_input_and_its_record_replays(tmp_path):
    run = session(SEED, tmp_path)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests == 10, run
    streams = [op for op in guarded.ops if isinstance(op, Stream)]
    assert any(op.tokens for op in streams) and any(not op.tokens for op in streams)
    events = guarded.lock.events
    assert events["streaming: update taken"] and events["streaming: update taken at the stop"]
    assert events["resumed after a streaming update"] >= run.streaming.updates
    recorded = session(SEED, tmp_path, check=False).manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


@with_vllm
def test_a_resumption_admitted_past_the_whole_request_check_is_caught_with_a_file_that_replays(
        tmp_path):
    broken = doubles()["WholeCheckSkippedOnResumption"]
    # without streaming input no request resumes with its blocks: the double passes
    plain = session(2, tmp_path, broken, impl=BROKEN, streaming=0.0)
    assert plain.manager.kvfuzz_session.divergence is None
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: session(seed, tmp_path, broken, impl=BROKEN), BROKEN, "vllm.kvmanager",
        seeds=3)


def drops_the_updates_last_token(rid, tokens=(), discard=False):
    """A broken mapping: each streaming update written a token short."""
    return Stream(rid, tuple(tokens[:-1]), discard)


@with_vllm
def test_a_guard_writing_an_update_short_is_caught(tmp_path, monkeypatch):
    from kvfuzz.fuzz.kvmanager import guard_streaming

    monkeypatch.setattr(guard_streaming, "Stream", drops_the_updates_last_token)
    with pytest.raises(kvfuzz.Mismatch) as raised:
        session(SEED, tmp_path)
    assert raised.value.divergence.lines[0] == ("call", "allocate_slots(r4, 42) after a "
                                                        "streaming update")


DRAFTS = dict(speculative="eagle", num_speculative=2)  # EAGLE: lookahead hashes of 1 token
DRAFTS_SEED = 4  # 4 stops keeping a hash over the discarded token; a rehashing lock step caught


@with_vllm
def test_streaming_input_with_drafts_and_lookahead_hashes_runs_clean_and_its_record_replays(
        tmp_path):
    """EAGLE's draft slots and lookahead hashes (synchronous scheduler): the caching after each
    output samples the token a stop discards (`discard`), and vLLM keeps a hash covering it
    (its lookahead read it) until a lookup after a preemption makes them again."""
    from kvfuzz.fuzz.kvmanager import streaming

    run = session(DRAFTS_SEED, tmp_path, **DRAFTS)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests == 10, run
    assert guarded.header.hash_lookahead and not guarded.header.async_scheduling
    events = guarded.lock.events
    assert events[streaming.SAMPLED_DISCARDED] and events[streaming.HASH_KEPT]
    recorded = session(DRAFTS_SEED, tmp_path, check=False, **DRAFTS).manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


@with_vllm
def test_a_lock_step_rehashing_a_stopped_request_is_caught(tmp_path, monkeypatch):
    """A lock step whose stop makes a request's hashes its tokens' again (the rule without
    lookahead hashing), where vLLM keeps the one covering the discarded token."""
    from kvfuzz.fuzz.kvmanager import lockstep

    monkeypatch.setattr(lockstep._Request, "drop_hashes_past",
                        lambda self, block_size: self._hashes.clear())
    with pytest.raises(kvfuzz.Mismatch):
        session(DRAFTS_SEED, tmp_path, **DRAFTS)


@with_vllm
def test_a_lock_step_keeping_a_stopped_requests_hashes_at_its_lookup_is_caught(tmp_path,
                                                                              monkeypatch):
    """A lock step that never makes a stopped request's hashes again at its lookup after a
    preemption (scheduler.py 1111), where one kept over a discarded token then differs: caught
    in session 0 with blocks of 4 tokens (a hash kept every fourth stop or so)."""
    from kvfuzz.fuzz.kvmanager import lockstep

    released = lockstep.KVManagerLockstep._hashes

    def never_again(self, request):
        request.rehash = False
        return released(self, request)
    monkeypatch.setattr(lockstep.KVManagerLockstep, "_hashes", never_again)
    with pytest.raises(kvfuzz.Mismatch):
        session(0, tmp_path, block_size=4, blocks=100, **DRAFTS)


@with_vllm
def test_streaming_input_with_drafts_under_the_async_scheduler_runs_clean_and_replays(tmp_path):
    """Its step in flight holds `1 + k` slots at a stop (the discarded token's and k
    placeholder drafts'), dropped with it."""
    run = session(0, tmp_path, named="ASYNC_STREAMING", **DRAFTS)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests == 10, run
    assert guarded.header.async_scheduling and guarded.header.lookahead == 2
    assert guarded.lock.events["streaming: the sampled token discarded (its step in flight)"]
    recorded = session(0, tmp_path, check=False, named="ASYNC_STREAMING",
                       **DRAFTS).manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok


class _Uncut(list):
    """A hash list whose cuts do nothing."""

    def __delitem__(self, key):
        pass


@with_vllm
def test_a_scheduler_keeping_the_discarded_tokens_hash_is_refused_by_name(tmp_path,
                                                                           monkeypatch):
    """vLLM's update cuts the hash of the block its discarded token completed; a scheduler
    that keeps it would pass unseen (the live driver pairs the engine's hashes with the
    trace's by position, sessions 1, 7 and 8 run clean so): the guard rehashes the request's
    tokens at each update and refuses it by name."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler
    from kvfuzz.impl.registry import load_attribute

    vllm_scheduler.build_scheduler()  # (prepares vLLM's import)
    scheduler = load_attribute("vllm.v1.core.sched.scheduler:Scheduler")
    released = scheduler._update_request_as_session

    def keeps_the_hash(self, session, update):
        session.block_hashes = _Uncut(session.block_hashes)
        released(self, session, update)
        session.block_hashes = list(session.block_hashes)
    monkeypatch.setattr(scheduler, "_update_request_as_session", keeps_the_hash)
    with pytest.raises(kvfuzz.GuardUnsupported, match="block hash 6 is not its tokens'"):
        session(SEED, tmp_path)


@with_vllm
def test_a_scheduler_cutting_the_hash_its_lookahead_kept_is_refused_by_name(tmp_path,
                                                                            monkeypatch):
    """Under lookahead hashing the release keeps the hash over the discarded token; a
    scheduler whose update makes the hashes its tokens' (cutting it) is refused."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler
    from kvfuzz.impl.registry import load_attribute

    vllm_scheduler.build_scheduler()  # (prepares vLLM's import)
    scheduler = load_attribute("vllm.v1.core.sched.scheduler:Scheduler")
    released = scheduler._update_request_as_session

    def rehashes(self, session, update):
        released(self, session, update)
        session.block_hashes.clear()
        session.update_block_hashes()
    monkeypatch.setattr(scheduler, "_update_request_as_session", rehashes)
    with pytest.raises(kvfuzz.GuardUnsupported, match="is not its tokens'"):
        session(DRAFTS_SEED, tmp_path, **DRAFTS)


@with_vllm
@pytest.mark.parametrize("seed, event", [
    (0, "streaming: the sampled token discarded (its step in flight)"),
    (80, "streaming: a preempted request stopped by its stale output")])
def test_streaming_input_under_the_async_scheduler_runs_clean_and_its_record_replays(
        seed, event, tmp_path):
    """`ASYNC_STREAMING` session 0: stops whose discarded token the trace had (`discard`),
    the step in flight at the stop dropped while the request waits (a `processed` of it);
    session 80: a preempted request stopped by its stale output."""
    run = session(seed, tmp_path, named="ASYNC_STREAMING")
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests == 10, run
    assert guarded.header.async_scheduling
    assert any(isinstance(op, Stream) and op.discard for op in guarded.ops)
    events = guarded.lock.events
    assert events[event]
    recorded = session(seed, tmp_path, check=False,
                       named="ASYNC_STREAMING").manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


def drops_the_discard(rid, tokens=(), discard=False):
    """A broken mapping: the discarded token kept in the trace."""
    return Stream(rid, tokens)


@with_vllm
def test_a_guard_keeping_the_discarded_token_is_caught(tmp_path, monkeypatch):
    from kvfuzz.fuzz.kvmanager import guard_streaming

    monkeypatch.setattr(guard_streaming, "Stream", drops_the_discard)
    with pytest.raises(kvfuzz.Mismatch):
        session(0, tmp_path, named="ASYNC_STREAMING")


def test_a_stream_op_round_trips_through_json_and_says_what_it_does():
    ops = (Arrive(0, (5, 6, 7)), Schedule(0, 3), Stream(0), Stream(0, (8, 9)), Schedule(0, 2),
           Stream(0, (1,), discard=True))
    trace = Trace(blocks=8, block_size=2, window=0, max_model_len=64, ops=ops,
                  async_scheduling=True)
    data = to_json(trace)
    assert data["ops"][2] == {"op": "stream", "rid": 0, "tokens": []}  # (discard: omitted)
    assert data["ops"][5] == {"op": "stream", "rid": 0, "tokens": [1], "discard": True}
    assert codec.from_json(data) == trace
    assert "waits for its next streaming update" in describe_op(ops[2])
    assert "update of 2 tokens" in describe_op(ops[3])


def test_a_streaming_updates_images_round_trip_and_bad_ones_are_refused():
    """`images` (an update's multimodal inputs) written only when some, read back; like an
    arrival's they lie in the update's tokens, sorted and apart."""
    ops = (Arrive(0, (5, 6, 7)), Schedule(0, 3), Stream(0, (8, 9, 4), images=(("a", 1, 2),)))
    trace = Trace(blocks=8, block_size=2, window=0, max_model_len=64, ops=ops)
    data = to_json(trace)
    assert data["ops"][2] == {"op": "stream", "rid": 0, "tokens": [8, 9, 4],
                              "images": [["a", 1, 2]]}
    assert codec.from_json(data) == trace
    assert "and 1 images" in describe_op(ops[2])
    for images in ([["a", 2, 2]], [["a", 0, 2], ["b", 1, 1]], [["", 0, 1]], [["a", 0, 0]]):
        data["ops"][2]["images"] = images
        with pytest.raises(FormatError, match=r"ops\[2\]\.images"):
            codec.from_json(data)


def _emptied(monkeypatch, queued_only: bool) -> list[str]:
    """Every streaming update sent brings no tokens (`queued_only`: only those sent while the
    request runs, queued for its stop, and each such request aborted by the client the next
    step once it has taken it: vLLM's scheduler would fail its resumption). The names of the
    requests that took one and were aborted so."""
    from kvfuzz.fuzz.kvmanager import vllm_streaming

    inputs = vllm_streaming.StreamingInputs
    sent, released = inputs._send, inputs.before_step
    emptied, aborted = set(), []

    def send(self, scheduler, name):
        left, request = self.left.get(name), scheduler.requests.get(name)
        running = request is not None and request.status.name == "RUNNING"
        if left and left[0] is not None and (running or not queued_only):
            left[0] = ([], left[0][1])
            emptied.add(name)
        sent(self, scheduler, name)

    def before_step(self, scheduler, step):
        from vllm.v1.request import RequestStatus

        for name in sorted(emptied):
            request = scheduler.requests.get(name)
            if request is not None and request.status == RequestStatus.WAITING and \
                    request.num_tokens == request.num_computed_tokens:
                emptied.discard(name)
                aborted.append(name)
                self.left.pop(name, None)
                scheduler.finish_requests(name, RequestStatus.FINISHED_ABORTED)
        released(self, scheduler, step)
    monkeypatch.setattr(inputs, "_send", send)
    if queued_only:
        monkeypatch.setattr(inputs, "before_step", before_step)
    return aborted


@with_vllm
@pytest.mark.parametrize("named, seed", [("STREAMING", SEED), ("ASYNC_STREAMING", 0)])
def test_an_update_of_no_tokens_waits_until_the_schedulers_assert(named, seed, tmp_path,
                                                                   monkeypatch):
    """vLLM takes an update of no tokens (the request WAITING with every token computed) and
    its next step fails `assert num_new_tokens > 0` at the resumption (scheduler.py 1347): the
    guard wrote it as a stop that waits (`stream` of no tokens), no divergence before."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    _emptied(monkeypatch, queued_only=False)
    guards = []

    def wrap(manager, **settings):
        guards.append(kvfuzz.guard(manager, "kvmanager", corpus=tmp_path, **settings))
        return guards[-1]
    with pytest.raises(AssertionError) as raised:
        vllm_scheduler.run_session(seed, wrap, workload=getattr(vllm_scheduler, named))
    assert raised.traceback[-1].path.name == "scheduler.py", raised.traceback[-1]
    guarded = guards[0].kvfuzz_session
    assert guarded.divergence is None and not list(tmp_path.glob("*.json"))
    assert any(isinstance(op, Stream) and not op.tokens for op in guarded.ops)


@with_vllm
@pytest.mark.parametrize("named, seed, workload, mapped", [
    ("STREAMING", SEED, {}, 0), ("STREAMING", 0, DRAFTS, 1), ("ASYNC_STREAMING", 0, {}, 1)])
def test_an_update_of_no_tokens_taken_at_the_stop_then_aborted_runs_clean_and_replays(
        named, seed, workload, mapped, tmp_path, monkeypatch):
    """Updates of no tokens queued while their requests run, each request aborted the step
    after its stop took one (before the scheduler's resumption would fail): the session runs
    clean and its recording replays. Where a call of the manager comes between the stop and
    the abort (`mapped` of them: another request's `cache_blocks` after its output, with
    drafts or under the asynchronous scheduler), the guard wrote the stop as one that waits,
    `stream` of no tokens, and the abort its `finish`; else the abort is the request's
    `finish` at its stop (the manager saw nothing between; always, synchronous without
    drafts: sessions 0 to 3 scanned, 2026-12-06)."""
    aborted = _emptied(monkeypatch, queued_only=True)
    run = session(seed, tmp_path, named=named, **workload)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests == 10, run
    assert aborted, "no update of no tokens taken"
    rids = {int(name.rsplit("-", 1)[1]) for name in aborted}
    ops = guarded.ops
    assert mapped == sum(isinstance(op, Stream) and not op.tokens and op.rid in rids and next(
        o for o in ops[index + 1:] if getattr(o, "rid", -1) == op.rid) == Finish(op.rid)
        for index, op in enumerate(ops))
    recorded = session(seed, tmp_path, check=False, named=named,
                       **workload).manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
