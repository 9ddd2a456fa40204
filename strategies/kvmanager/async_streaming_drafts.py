"""The "async streaming drafts" profile (`kvmanager/5[async streaming drafts]`, a stream of its
own): resumable (streaming-input) requests under vLLM's `AsyncScheduler` with draft tokens,
shaped as the guard's `replace(ASYNC_STREAMING, speculative=...)` sessions (docs/upstream-vllm.md,
"Streaming input (resumable requests), guarded": its speculative paragraph), so the lock step's
asynchronous `stream` with `discard` over a step in flight of `1 + k` slots comes from kvfuzz's
own generator. It composes the "async streaming" profile's sessions (`async_streaming.py`:
stops at max_tokens or a stop token, updates at the stop or after a wait, ends, dropped steps
processed while waiting or resumed before, stops by stale output, the liveness hole's abort)
with the "async drafts" profile's scheduler (`async_drafts.py`: `placeholder` with `drafts`,
`settle` with `rejected`, stale outputs of several tokens, padded admissions held in flight,
EAGLE or MTP with lookahead hashing or the drop), with what the two change together:

- an output's accepted drafts are trimmed at a stop token as at max_tokens (the scheduler's
  `check_stop` cuts the rest), the trimmed ones rejected;
- a resumption whose update leaves one token is padded as an admission is (`pad_spec_decode`:
  its computed tokens count as a hit), its rows held in flight until its output;
- a preempted session stopped by a stale output of several tokens: the accepted drafts before
  the stop token are stale `sample`s where it waits for an update; an update taken at once
  takes them into its tokens (the release's `_update_request_as_session`, as the guard maps
  it), so the `stream` carries them first.

The block accounting stays the two profiles' estimate; where it is wrong the trace stays valid.
Drawn from its own `rng`: a new stream, so no other profile's traces change. Standard library
only.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.async_drafts import _DraftScheduler
from kvfuzz.strategies.kvmanager.async_outputs import VOCAB
from kvfuzz.strategies.kvmanager.async_streaming import _Session, _Sessions
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import Finish, Processed, Sample, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "async streaming drafts"
MODES = ("eagle", "eagle", "eagle", "eagle drop", "mtp", "mtp", "mtp drop")


def build(rng: random.Random, num_ops: int) -> Trace:
    mode = rng.choice(MODES)
    mtp, drop = mode.startswith("mtp"), mode.endswith("drop")
    k = rng.choice((2, 2, 3)) if mtp else rng.choice((1, 2, 2, 3))
    # MTP's blocks hold its k tokens (vLLM refuses a smaller scheduler block with the drop)
    size = rng.choice([s for s in (1, 2, 4, 4, 8, 16) if not mtp or s >= k])
    window = rng.randint(2, 4 * size) if rng.random() < 0.5 else 0
    extra = -(-(3 * k + 2) // size)  # two steps' drafts and the lookahead slots
    blocks = extra + rng.choice((rng.randint(6, 16), rng.randint(16, 48)))
    max_model_len = 1024 if rng.random() < 0.8 else \
        rng.randint(8, 16) * size + 2 * k + rng.randint(2, 5)
    retention = rng.choice((None, 0, 0) + ((rng.randint(1, 4) * size,) if window else ()))
    fit = rng.random() < 0.8
    budget = max(2 + k, rng.choice((1, 2, 4, 8)) * size)  # a decode's 1 + k fits a step
    in_flight = 2 * budget if rng.random() < 0.85 else None
    watermark = 0.0 if rng.random() < 0.9 else rng.choice((0.01, 0.1))
    hashed = 0 if drop else (k if mtp else 1)
    shaper = _DraftSessions(rng, size, window, blocks, budget, max_model_len, k, extra, hashed,
                            k - 1 if mtp else 0, drop)
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    return Trace(blocks, size, window, max_model_len, tuple(shaper.ops[:num_ops]), retention,
                 fit, in_flight, watermark, async_scheduling=True, lookahead=k, eagle=drop,
                 hash_lookahead=hashed, prefill_lookahead=k if mtp else 0,
                 note=f"profile {PROFILE}")


class _DraftSessions(_Sessions, _DraftScheduler):
    """"async streaming"'s sessions on "async drafts"' scheduler (the MRO: the sessions'
    stops, updates and resumptions first, the drafts' steps, admissions and outputs beneath)."""

    def __init__(self, rng, size, window, blocks, budget, max_model_len, k, extra, ahead,
                 held_back, drop):
        _DraftScheduler.__init__(self, rng, size, window, blocks, budget, max_model_len, k,
                                 extra, ahead, held_back, drop)
        self.chunk_retries = True
        self.paused, self.stopping, self.idle = [], [], 0
        self.families = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 4) * size)]
                         for _ in range(2)]
        # (as `_Sessions`', the drafts' room taken off the pool and max_model_len)
        longest = max(2, min(max_model_len - 2 * k - 5,
                             ((blocks - extra - 1) // (2 if window else 1) - 1) * size))
        self.arrivals = [(at, self._session(r, longest)) for at, r in self.arrivals]
        for _, request in self.arrivals:
            request.spec = False

    def _scheduled(self, request, new: int, drafts: int = 0, rows: int = 0) -> tuple:
        return _DraftScheduler._scheduled(self, request, new, drafts, rows)

    def _admit_waiting(self, left: int, scheduled: list) -> None:
        """Sessions holding blocks first, no lookup (as "async streaming"'s), padded where one
        token is left as an admission after a hit is (`_pads`: its computed tokens the hit);
        then the waiting requests, as "async drafts"' admissions."""
        for session in [r for r in self.waiting if r.computed]:
            if left <= 0 or len(self.running) >= self.max_running:
                return
            chunk, rows = min(len(session.tokens) - session.computed, left), 0
            if self._pads(session, session.computed):
                if left < 1 + self.k:
                    return
                chunk, rows = 1 + self.k, self.k
            if not self._fits(session, session.computed + chunk, whole=True):
                return
            self._running(session, session.computed)
            session.spec = False
            self.ops.append(Schedule(session.rid, chunk, pad=rows, rows_in_flight=bool(rows)))
            scheduled.append(self._scheduled(session, chunk, 0, rows))
            left -= chunk
        _DraftScheduler._admit_waiting(self, left, scheduled)

    def _fits(self, request, tokens: int, whole: bool = False) -> bool:
        """"async streaming"'s estimate (waiting sessions' blocks held too), a request holding
        none counted as none (the drafts' `_blocks` adds k lookahead slots to any count)."""
        kept = sum(self._blocks(r.computed) for r in (*self.waiting, *self.paused)
                   if r is not request and r.computed)
        self.blocks -= kept
        fits = _DraftScheduler._fits(self, request, tokens, whole)
        self.blocks += kept
        return fits

    def _tokens(self, request, drafts: int | None = None):
        """The tokens an output appends, trimmed at a stop token as at max_tokens. (Both
        parents name a `_tokens`: "async streaming"'s, `_tokens(count)`, an update's new
        tokens, is the call without `drafts`.)"""
        if drafts is None:
            return _Sessions._tokens(self, request)
        tokens = _DraftScheduler._tokens(self, request, drafts)
        if isinstance(request, _Session) and request.stop_at:
            tokens = max(1, min(tokens, request.prompt + request.stop_at - len(request.tokens)))
        return tokens

    def _process(self, step: int, scheduled: list) -> None:
        """"async streaming"'s output (a stopped session's dropped step processed while it
        waits, then the sessions its tokens stopped) over "async drafts"' (the tokens and the
        accepted drafts, the rest rejected; a preempted request's as stale output)."""
        for entry in [e for e in scheduled if isinstance(e[0], _Session) and
                      e[0].dropped == step]:
            session = entry[0]
            session.dropped = -1
            scheduled = [e for e in scheduled if e is not entry]
            if session.held and session in (*self.waiting, *self.paused):
                self.ops.append(Processed(session.rid))
                session.held = False
        for request, epoch, samples, drafts, rows in scheduled:
            if request.epoch != epoch or request not in self.running:
                if samples and request in self.waiting and request.pending:
                    request.pending -= 1  # preempted with this step in flight
                    self._stale(request, self._tokens(request, drafts))
                continue
            self._output(request, step, samples, drafts, rows)
        for session in self.stopping:
            self._stop(session, step)
            session.spec = False
        self.stopping.clear()

    def _stale(self, request, tokens: int) -> None:
        """A preempted request's stale output of `tokens`: each a stale `sample`, except that a
        session's stop token (its segment's end, or at random in half) stops it there: the
        drafts accepted before it stale `sample`s where it waits, an update taken at once's
        first tokens (the stop token discarded, never in the trace)."""
        if not isinstance(request, _Session):
            for _ in range(tokens):
                self._append(request, Sample, stale=True)
            if request.done and not request.pending:
                self.waiting.remove(request)  # its stale output was its last
                self.ops.append(Finish(request.rid))
            return
        produced = len(request.tokens) - request.prompt
        stop = next((i for i in range(1, tokens + 1) if request.ends_at(produced + i)), 0)
        if not stop and self.rng.random() < 0.5:
            stop = self.rng.randint(1, tokens)
        accepted = [self.rng.randrange(VOCAB) for _ in range((stop or tokens + 1) - 1)]
        if not stop:
            for token in accepted:
                request.tokens.append(token)
                self.ops.append(Sample(request.rid, token, True))
            return
        self.waiting.remove(request)
        if not request.updates and self.rng.random() < 0.3:  # (a stop waiting, more often)
            self.ops.append(Finish(request.rid))
            return
        if request.updates and self.rng.random() < 0.4:  # its update queued: taken at once
            new, more = request.updates.pop(0)
            request.tokens += accepted + new
            request.prompt, request.outputs = len(request.tokens), more
            self._stop_token(request)
            self.ops.append(Stream(request.rid, tuple(accepted + new), False))
            self.waiting.append(request)
            return
        for token in accepted:
            request.tokens.append(token)
            self.ops.append(Sample(request.rid, token, True))
        self.ops.append(Stream(request.rid, (), False))
        request.update_at = self.now + self.rng.randint(1, 3)
        self.paused.append(request)


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[async streaming drafts]", build, num_ops=200,
                           max_fuzz_ops=200)
