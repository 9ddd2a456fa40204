"""The "async streaming" profile (`kvmanager/5[async streaming]`, a stream of its own: a share of
the mix, alone only for its first hour): resumable (streaming-input) requests under vLLM's
`AsyncScheduler`, traces shaped as the guard's `ASYNC_STREAMING` sessions (docs/upstream-vllm.md,
"Streaming input (resumable requests), guarded": its `AsyncScheduler` paragraph), so the lock step's
`stream` with `discard` (`fuzz/kvmanager/streaming.py`) comes from kvfuzz's own generator. The
scheduler is the "async outputs" profile's (`async_outputs.py`: a batch queue of two, output
placeholders, processed outputs, stale output after a preemption); the sessions are the "streaming"
profile's (`streaming_input.py`: updates at the stop or after a wait, resumptions with no lookup,
ends at the stop or while waiting), with what the asynchronous scheduler changes:

- a session stops at the output that samples its segment's last token (`max_tokens`: the
  scheduler sat its next step out, so nothing of it is in flight, `processed` first) or, in
  some segments, a stop token before that (its next step is in flight). The post-output
  `cache_blocks` saw that token, so the trace has it (`sample`, `settle`); the stop discards
  it: `stream(rid, tokens, discard=True)` (an update queued at the stop) or `stream(rid,
  discard=True)` and the update 1 to 3 steps later, or the end (a `finish` at the stop or
  while it waits);
- the step in flight at such a stop is dropped (`drop_stale_output`): while the session waits
  its output is a `processed` of the waiting request; a session holding blocks is resumed
  first, with no lookup (`schedule` of the waiting request), possibly before that output came
  (its tokens in flight passed to the resumption);
- a session preempted with a step in flight whose token ends its segment is stopped by that
  stale output (the token discarded, never in the trace): `stream` without `discard` of the
  waiting request, which holds no blocks; it is admitted again through the cache;
- paused sessions count against the running limit (`num_waiting_for_streaming_input`); sessions
  holding the pool while none can resume (the release's liveness hole) end as the guard's
  driver ends them, one aborted after a few idle steps.

As in the two profiles it composes, the block accounting is this module's own estimate (waiting
sessions' blocks counted held); where it is wrong the trace stays valid (ops of a request in
another state resolve to nothing). Standard library only.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.async_outputs import VOCAB, _AsyncScheduler, _Request
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.streaming_input import IDLE_STEPS
from kvfuzz.strategies.kvmanager.trace import Finish, Processed, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "async streaming"


def build(rng: random.Random, num_ops: int) -> Trace:
    size = rng.choice((1, 2, 4, 4, 8, 16))
    window = rng.randint(2, 4 * size) if rng.random() < 0.6 else 0
    blocks = rng.choice((rng.randint(6, 16), rng.randint(16, 48)))
    max_model_len = 1024 if rng.random() < 0.8 else rng.randint(6, 16) * size + rng.randint(0, 3)
    retention = rng.choice((None, None, 0) + ((rng.randint(1, 4) * size,) if window else ()))
    budget = max(2, rng.choice((1, 2, 4, 8)) * size)  # the step's max_num_batched_tokens
    fit, settles = rng.random() < 0.8, rng.random() < 0.8
    watermark = rng.choice((0.01, 0.1)) if rng.random() < 0.15 else 0.0
    in_flight = 2 * budget if rng.random() < 0.85 else None  # the engine's, in most
    shaper = _Sessions(rng, size, window, blocks, budget, max_model_len, settles)
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    return Trace(blocks, size, window, max_model_len, tuple(shaper.ops[:num_ops]), retention,
                 full_sequence_must_fit=fit, max_in_flight_tokens=in_flight,
                 watermark=watermark, async_scheduling=True, note=f"profile {PROFILE}")


class _Session(_Request):
    """A resumable request: its `updates` to come ((tokens, outputs) each), then its end."""

    def __init__(self, request: _Request, updates: list):
        super().__init__(request.rid, request.tokens, request.outputs)
        self.updates = updates
        self.stop_at = 0       # a stop token's output in this segment (0: its max_tokens only)
        self.dropped = -1      # the step in flight at its stop, whose output is dropped
        self.update_at = -1    # the step its next update (or end) comes, while paused

    @property
    def done(self) -> bool:  # its stops are `_Sessions`' own (never finished by "async outputs")
        return False

    def ends_at(self, produced: int) -> bool:
        """Whether its `produced`-th output of the segment stops it."""
        return produced >= self.outputs or produced == self.stop_at


class _Sessions(_AsyncScheduler):
    """`_AsyncScheduler` whose requests are sessions in 6 of 10. Waiting sessions holding blocks
    sit in `waiting` (their `computed` kept) and are drained first; `paused` ones wait for an
    update."""

    def __init__(self, rng, size, window, blocks, budget, max_model_len, settles):
        super().__init__(rng, size, window, blocks, budget, max_model_len, settles)
        self.paused: list[_Session] = []
        self.stopping: list[_Session] = []
        self.idle = 0
        self.families = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 4) * size)]
                         for _ in range(2)]
        longest = max(2, min(max_model_len - 3,
                             ((blocks - 1) // (2 if window else 1) - 1) * size))
        self.arrivals = [(at, self._session(r, longest)) for at, r in self.arrivals]

    # paused sessions still hold a model-runner slot (vLLM's `num_waiting_for_streaming_input`
    # counts against `max_num_active_reqs` in the waiting loop, the one place this is read)
    @property
    def max_running(self) -> int:
        return self._max_running - len(self.paused)

    @max_running.setter
    def max_running(self, value: int) -> None:
        self._max_running = value

    def _session(self, request: _Request, longest: int) -> _Request:
        """The request, or a session of it (its first segment shortened to leave room), with
        1 to 3 updates while the pool holds them all (a session's tokens fit it alone)."""
        rng = self.rng
        if rng.random() >= 0.6:
            return request
        request.outputs = min(request.outputs, rng.randint(1, 2 * self.size + 1),
                              max(1, (longest - request.prompt) // 2))
        left, updates = longest - request.prompt - request.outputs - 1, []
        for _ in range(rng.randint(1, 3)):
            new, more = rng.randint(1, 3 * self.size + 1), rng.randint(1, 2 * self.size + 1)
            if new + more + 1 > left:
                break
            updates.append((self._tokens(new), more))
            left -= new + more + 1
        session = _Session(request, updates)
        self._stop_token(session)
        return session

    def _tokens(self, count: int) -> list[int]:
        """An update's tokens, a family's in half (hits across updates and requests)."""
        family = self.rng.choice(self.families) if self.rng.random() < 0.5 else []
        return (family + [self.rng.randrange(VOCAB) for _ in range(count)])[:count]

    def _stop_token(self, session: _Session) -> None:
        """In about a third of segments a stop token ends it before its `max_tokens`."""
        session.stop_at = self.rng.randint(1, session.outputs - 1) \
            if session.outputs > 1 and self.rng.random() < 0.35 else 0

    # -- steps --------------------------------------------------------------------------------
    def step(self) -> bool:
        self._updates()
        if super().step():
            return True
        if self.paused:  # only sessions waiting for an update: time passes
            self.now += 1
            return True
        return False

    def _updates(self) -> None:
        """Updates (or ends) that come to paused sessions this step (`add_request`)."""
        for session in [s for s in self.paused if s.update_at <= self.now]:
            self.paused.remove(session)
            if session.updates:
                self._take(session, discard=False)
                self.waiting.append(session)
            else:  # its end comes while it waits: an abort
                self.ops.append(Finish(session.rid))

    def _take(self, session: _Session, discard: bool) -> None:
        new, more = session.updates.pop(0)
        session.tokens += new
        session.prompt, session.outputs = len(session.tokens), more
        self._stop_token(session)
        self.ops.append(Stream(session.rid, tuple(new), discard))

    def _schedule(self) -> list:
        """The step; after `IDLE_STEPS` in which nothing ran while sessions held blocks, one
        of them aborted (the guard's driver)."""
        scheduled = super()._schedule()
        holding = [r for r in self.waiting if r.computed]
        self.idle = 0 if scheduled or self.queue or not holding else self.idle + 1
        if self.idle >= IDLE_STEPS:
            self.waiting.remove(holding[0])
            self.ops.append(Finish(holding[0].rid))
            self.idle = 0
        return scheduled

    def _admit_waiting(self, left: int, scheduled: list) -> None:
        """Sessions holding blocks first (`kv_holding_waiting`), no lookup, their dropped
        step's output in flight or not; a refusal ends the waiting loop (it keeps its blocks);
        then the waiting requests."""
        for session in [r for r in self.waiting if r.computed]:
            if left <= 0 or len(self.running) >= self.max_running:
                return
            chunk = min(len(session.tokens) - session.computed, left)
            if not self._fits(session, session.computed + chunk, whole=True):
                return
            self._running(session, session.computed)
            self.ops.append(Schedule(session.rid, chunk))
            scheduled.append(self._scheduled(session, chunk))
            left -= chunk
        super()._admit_waiting(left, scheduled)

    def _fits(self, request: _Request, tokens: int, whole: bool = False) -> bool:
        """The scheduler's estimate, waiting sessions' blocks held too."""
        kept = sum(self._blocks(r.computed) for r in (*self.waiting, *self.paused)
                   if r is not request)
        self.blocks -= kept  # (the pool the running requests and this one share)
        fits = super()._fits(request, tokens, whole)
        self.blocks += kept
        return fits

    # -- outputs ------------------------------------------------------------------------------
    def _process(self, step: int, scheduled: list) -> None:
        """The step's output: a stopped session's dropped step is a `processed` of the waiting
        session (nothing once it resumed or ended); the others' as "async outputs"; then the
        sessions its tokens stopped."""
        dropped = [entry for entry in scheduled
                   if isinstance(entry[0], _Session) and entry[0].dropped == step]
        for session, _, _ in dropped:
            session.dropped = -1
            if session.held and session in (*self.waiting, *self.paused):
                self.ops.append(Processed(session.rid))
                session.held = False
        super()._process(step, [entry for entry in scheduled if entry not in dropped])
        for session in self.stopping:
            self._stop(session, step)
        self.stopping.clear()

    def _append(self, request: _Request, op, stale: bool = False) -> None:
        produced = len(request.tokens) - request.prompt + 1
        # (a stale token is a stop token in half: the guard's sessions, stopped at max_tokens
        # only, reach a stop by stale output twice in 100)
        if stale and isinstance(request, _Session) and \
                (request.ends_at(produced) or self.rng.random() < 0.5):
            self._stale_stop(request)
            return
        super()._append(request, op, stale)
        if not stale and isinstance(request, _Session) and request.ends_at(produced):
            self.stopping.append(request)

    def _stop(self, session: _Session, step: int) -> None:
        """A running session stopped by the token just sampled (its `sample` and `settle`
        made): the token discarded, its step in flight (if any) dropped."""
        self.running.remove(session)
        if session.held and session.last == step:  # nothing in flight: it sat its step out
            self.ops.append(Processed(session.rid))
            session.held = False
        session.dropped = session.last if session.held else -1
        session.pending, session.epoch = 0, session.epoch + 1
        if not session.updates and self.rng.random() < 0.6:
            self.ops.append(Finish(session.rid))  # its end queued at the stop
            return
        session.tokens.pop()
        session.computed = len(session.tokens)
        self._paused_or_taken(session, discard=True)

    def _stale_stop(self, session: _Session) -> None:
        """A preempted session stopped by its stale output (`status_before_stop` not
        RUNNING): that token discarded, never in the trace; it holds no blocks."""
        self.waiting.remove(session)
        if not session.updates and self.rng.random() < 0.3:  # (a stop waiting, more often)
            self.ops.append(Finish(session.rid))
            return
        self._paused_or_taken(session, discard=False)

    def _paused_or_taken(self, session: _Session, discard: bool) -> None:
        if session.updates and self.rng.random() < 0.4:  # its update queued: taken at the stop
            self._take(session, discard)
            self.waiting.append(session)
            return
        self.ops.append(Stream(session.rid, (), discard))
        session.update_at = self.now + self.rng.randint(1, 3)
        self.paused.append(session)


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[async streaming]", build, num_ops=200, max_fuzz_ops=200)
