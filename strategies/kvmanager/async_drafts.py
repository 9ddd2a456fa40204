"""The "async drafts" profile (`kvmanager/5[async drafts]`, a stream of its own, a share of the mix
since 2026-12-06, alone only before): traces shaped as vLLM's `AsyncScheduler` makes its calls with
speculative decoding, k draft tokens a step (EAGLE or MTP), as the guard's `ASYNC_SPEC` sessions
record them (docs/upstream-vllm.md, "Draft tokens under vLLM's asynchronous scheduler, guarded"), so
the lock step's draft ops (`async_ops.DRAFT_EVENTS`) come from kvfuzz's own generator too:

- a decoding request gets `1 + k` placeholder slots a step (`placeholder` with `drafts`: the
  token its step in flight samples and k drafts), fewer drafts where the step's budget or
  max_model_len leaves less (the scheduler's caps);
- each output appends the token and the drafts the fake model accepted (0 to all, uniform),
  trimmed at the request's last output, then `settle` with `rejected`: the rejected drafts
  and the trimmed tokens rolled back before the scheduler's `cache_blocks`; a request done at
  an output finishes there, with its next step in flight;
- a request that sat out a step (the budget spent on others, or at random) has nothing in
  flight at its last output (`processed` first) and decodes from its last token: `1 + k`
  slots from `num_tokens - 1`;
- a preemption with a sampling step in flight: all of that step's tokens come as stale
  output (several a step), no rollback; the request is admitted again once they came;
- an admission whose estimated hit leaves one token, with no prefill chunk in the step and a
  running request scheduled or a hit, is padded (`schedule` with `pad` k and
  `rows_in_flight`): its k rows stay computed and in flight until its output, whose `settle`
  rejects them all; in 60% one or two earlier prompts come again cut one token past a block's
  end, so that such hits happen.

The engine's settings as the guard's recordings have them (`guard_header.py` refuses extra
retained tokens, so none here): EAGLE with lookahead hashes of one token (vLLM's default), or
its last-block drop; MTP of 2 to 4 tokens with lookahead hashes and prefill lookahead of k, or
the drop; k lookahead slots on every allocation; a window in 70%, blocks of 1 to 16 tokens
(MTP's at least k), `max_in_flight_tokens` twice the step's budget in most. The scheduler's
shape and block estimate are the "async outputs" profile's (`async_outputs.py`), whose
estimate errors leave the trace valid the same way. Standard library only.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.async_outputs import _AsyncScheduler, _Request
from kvfuzz.strategies.kvmanager.trace import (Finish, Placeholder, Processed, Sample, Schedule,
                                               Settle, Trace)
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "async drafts"
MODES = ("eagle", "eagle", "eagle", "eagle drop", "mtp", "mtp", "mtp drop")


def draft_settings(rng: random.Random, steps_in_flight: int) -> dict:
    """The engine's settings of a draft-token trace, drawn: the drafter (EAGLE or MTP, with or
    without the last block's drop), k, the block size, a window, the pool with room for the
    drafts of `steps_in_flight` steps (1: the synchronous scheduler's) beside the requests,
    max_model_len, retention, the whole-request check, the step's budget, the tokens in flight
    allowed, the watermark and the hashed lookahead."""
    mode = rng.choice(MODES)
    mtp, drop = mode.startswith("mtp"), mode.endswith("drop")
    k = rng.choice((2, 2, 3, 4)) if mtp else rng.choice((1, 2, 2, 3))
    # MTP's blocks hold its k tokens (vLLM refuses a smaller scheduler block with the drop)
    size = rng.choice([s for s in (1, 2, 2, 4, 4, 8, 16) if not mtp or s >= k])
    window = 0 if rng.random() < 0.3 else rng.randint(2, 4 * size)
    # room beside the requests for the steps' drafts and the lookahead slots
    extra = -(-((1 + steps_in_flight) * k + 2) // size)
    blocks = extra + rng.choice((rng.randint(4, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(4, 12) * size + 2 * k
                                + rng.randint(2, 5)))
    retention = rng.choice((None, 0, 0) + ((rng.randint(1, 4) * size,) if window else ()))
    fit = rng.random() < 0.7
    budget = max(2 + k, rng.choice((1, 2, 4, 8)) * size)  # a decode's 1 + k fits a step
    in_flight = steps_in_flight * budget if rng.random() < 0.85 else None
    watermark = 0.0 if rng.random() < 0.9 else rng.choice((0.01, 0.1))
    hashed = 0 if drop else (k if mtp else 1)
    return dict(mtp=mtp, drop=drop, k=k, size=size, window=window, extra=extra, blocks=blocks,
                max_model_len=max_model_len, retention=retention, fit=fit, budget=budget,
                in_flight=in_flight, watermark=watermark, hashed=hashed)


def build(rng: random.Random, num_ops: int) -> Trace:
    d = draft_settings(rng, 2)
    k, mtp = d["k"], d["mtp"]
    shaper = _DraftScheduler(rng, d["size"], d["window"], d["blocks"], d["budget"],
                             d["max_model_len"], k, d["extra"], d["hashed"],
                             k - 1 if mtp else 0, d["drop"])
    shaper.chunk_retries = True  # (since 2026-12-06: `_AsyncScheduler._chunk_refused`)
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    return Trace(d["blocks"], d["size"], d["window"], d["max_model_len"],
                 tuple(shaper.ops[:num_ops]), d["retention"], d["fit"], d["in_flight"],
                 d["watermark"], async_scheduling=True, lookahead=k, eagle=d["drop"],
                 hash_lookahead=d["hashed"], prefill_lookahead=k if mtp else 0,
                 note=f"profile {PROFILE}")


class _DraftScheduler(_AsyncScheduler):
    """`_AsyncScheduler` with k drafts a decode. Each request also has `spec` (a step of it
    that samples was scheduled since its admission: its next ones carry drafts, as the
    scheduler's `spec_token_ids` placeholders do). A step's entry: (request, its admission,
    whether it samples, its drafts, its padded rows)."""

    def __init__(self, rng, size: int, window: int, blocks: int, budget: int,
                 max_model_len: int, k: int, extra: int, ahead: int, held_back: int,
                 drop: bool):
        # the requests sized as "async outputs"' with the drafts' room taken off
        super().__init__(rng, size, window, blocks - extra, budget,
                         max_model_len - 2 * k - 2, settles=True)
        self.blocks, self.max_model_len, self.k = blocks, max_model_len, k
        # the tokens past a block its hash covers, the computed tokens MTP holds back from
        # caching, EAGLE's last-block drop
        self.ahead, self.held_back, self.drop = ahead, held_back, drop
        # what the padding reads of a step, its running part's: a prefill chunk, a request
        self.prefill = self.running_scheduled = False
        self._resend(rng)
        for _, request in self.arrivals:
            request.spec = False

    def _resend(self, rng) -> None:
        """In 60%, one or two prompts of earlier requests sent again cut one token past a
        block's end, a few steps later: met again, the hit can leave that token alone, which the
        scheduler pads (with lookahead hashes of one token, EAGLE's default; MTP's longer
        lookahead and EAGLE's drop leave more)."""
        sources = [pair for pair in self.arrivals if pair[1].prompt > self.size]
        for _ in range(rng.randint(1, 2) if sources and rng.random() < 0.6 else 0):
            arrival, source = rng.choice(sources)
            cut = rng.randint(1, (source.prompt - 1) // self.size) * self.size + 1
            outputs = max(1, min(rng.randint(1, 4 * self.size + 4),
                                 source.prompt + source.outputs - cut))
            request = _Request(len(self.arrivals), source.tokens[:cut], outputs)
            self.arrivals.append((arrival + rng.randint(3, 12), request))
        self.arrivals.sort(key=lambda pair: pair[0])

    def _schedule(self) -> list:
        """The running requests first, then the waiting ones (none after a preemption), as
        "async outputs"' steps; a decode of `1 + drafts`, an admission padded where the
        scheduler pads."""
        left, scheduled, preempted, prefill = self.budget, [], False, False
        for request in list(self.running):
            if request not in self.running or left <= 0 or self.rng.random() > 0.93:
                continue  # preempted this step, out of budget, or sits this step out
            if len(request.tokens) - request.prompt + request.pending >= request.outputs:
                continue  # its steps in flight surely end it: nothing more to schedule
            op, new, drafts = self._next(request, left)
            if op is None:
                continue
            while not self._fits(request, new) and self.running[-1] is not request:
                # (no refused call first of a decode, as "async outputs" makes: where our
                # estimate is wrong and it succeeds, its retry would allocate 1 + k slots
                # again; a prefill chunk's is made, and made again with `again`)
                op = self._chunk_refused(op) if new > 1 else op
                self._preempt(self.running[-1])
                preempted = True
            if not self._fits(request, new):
                op = self._chunk_refused(op) if new > 1 else op
                self._preempt(request)
                preempted = True
                continue
            self.ops.append(op)
            prefill |= not request.spec and request.computed + new < len(request.tokens)
            scheduled.append(self._scheduled(request, new, drafts))
            left -= new
        # what the padding reads of the step: its running part alone
        self.prefill, self.running_scheduled = prefill, bool(scheduled)
        if not preempted:
            self._admit_waiting(left, scheduled)
        return scheduled

    def _admit(self, request, left: int, scheduled: list) -> int | None:
        """As "async outputs"' admission, padded where the scheduler pads (`_pads`); None where
        the pool would refuse it (our estimate) or the budget is short of a padded step (the
        scheduler prefers not to schedule it than unpadded)."""
        made = self._admission(request, left)
        if made is None:
            return None
        chunk, rows = made
        # the budget left: the lock step caps it at the tokens the real hit leaves
        self.ops.append(Schedule(request.rid, left, pad=rows, rows_in_flight=bool(rows)))
        scheduled.append(self._scheduled(request, chunk, 0, rows))
        return chunk

    def _admission(self, request, left: int) -> tuple[int, int] | None:
        """An admission's chunk and padded rows, the request made running; None where it is
        not made (`_admit`)."""
        hit = self._hit(request)
        chunk, rows = min(len(request.tokens) - hit, left), 0
        if self._pads(request, hit):
            if left < 1 + self.k:
                return None
            chunk, rows = 1 + self.k, self.k
        if not self._fits(request, hit + chunk, whole=True):
            return None
        self._running(request, hit)
        request.spec = False
        return chunk, rows

    def _next(self, request, left: int):
        """A running request's op this step, its new tokens and drafts: the prompt's next
        chunk; else `1 + drafts` (the scheduler's `num_tokens_with_spec + placeholders -
        computed`, capped by the budget and by max_model_len less the sampled token), as a
        `placeholder`, or, from its last token with no draft left, that token's schedule."""
        # (a request's last output always comes with its `settle`, and `processed` with it where
        # nothing else of it is in flight: `_process`)
        if not request.spec:
            chunk = min(len(request.tokens) - request.computed, left)
            return Schedule(request.rid, chunk), chunk, 0
        new = min(1 + self.k, left, self.max_model_len - request.computed - 1)
        if new < 1 or request.computed < len(request.tokens) - 1:
            return None, 0, 0
        if new == 1 and request.computed < len(request.tokens):
            return Schedule(request.rid, 1), 1, 0
        return Placeholder(request.rid, new - 1), new, new - 1

    def _pads(self, request, hit: int) -> bool:
        """The scheduler's `pad_spec_decode`: one token left after the hit, no prefill chunk in
        the step's running part, a running request scheduled or a hit, and room for the rows
        and the sampled token."""
        return len(request.tokens) - hit == 1 and not self.prefill and \
            (self.running_scheduled or hit > 0) and hit + 1 + self.k + 1 <= self.max_model_len

    def _scheduled(self, request, new: int, drafts: int, rows: int = 0) -> tuple:
        request.computed += new
        request.last, request.held = self.now, True
        self._cache(request)
        samples = request.spec or request.computed >= len(request.tokens)
        request.pending += samples
        request.spec |= samples
        return request, request.epoch, samples, drafts, rows

    def _cache(self, request) -> None:
        """Our estimate of the blocks cached: the whole blocks of its tokens computed (less
        those MTP holds back) whose hash exists (the lookahead tokens after them do), each
        keyed by the tokens its hash covers."""
        cacheable = min(request.computed, len(request.tokens)) - self.held_back
        for end in range(self.size, cacheable // self.size * self.size + 1, self.size):
            if end + self.ahead <= len(request.tokens):
                self.cached.add(tuple(request.tokens[:end + self.ahead]))

    def _hit(self, request) -> int:
        """Our estimate of its prefix hit: the longest run of whole blocks cached, each with
        the lookahead tokens after it, the last token never a hit; EAGLE's drop takes the
        last block off."""
        hit, tokens = 0, request.tokens
        while hit + self.size < len(tokens) and hit + self.size + self.ahead <= len(tokens) \
                and tuple(tokens[:hit + self.size + self.ahead]) in self.cached:
            hit += self.size
        return max(0, hit - self.size) if self.drop else hit

    def _process(self, step: int, scheduled: list) -> None:
        """A step's output: each sampling request's token and accepted drafts appended
        (`sample`s), the rest rolled back (`settle` with `rejected`); a preempted request's as
        stale output; a request at its last output finishes."""
        for request, epoch, samples, drafts, rows in scheduled:
            if request.epoch != epoch or request not in self.running:
                if samples and request in self.waiting and request.pending:
                    request.pending -= 1  # preempted with this step in flight
                    for _ in range(self._tokens(request, drafts)):
                        self._append(request, Sample, stale=True)
                    if request.done and not request.pending:
                        self.waiting.remove(request)  # its stale output was its last
                        self.ops.append(Finish(request.rid))
                continue
            self._output(request, step, samples, drafts, rows)

    def _output(self, request, step: int, samples: int, drafts: int, rows: int) -> None:
        """A running request's output of `step`: its step in flight processed, its token and
        accepted drafts appended (`sample`s) and the rest rolled back (`settle`), its finish
        at its last output (its next step, if any, in flight)."""
        if request.last == step and request.held:
            self.ops.append(Processed(request.rid))  # nothing of it in flight now
            request.held = False
        if samples:
            request.pending -= 1
            tokens = self._tokens(request, drafts)
            for _ in range(tokens):
                self._append(request, Sample)
            rejected = rows or drafts + 1 - tokens
            request.computed -= rejected
            self.ops.append(Settle(request.rid, rejected))
            self._cache(request)
        if request.done:  # finished here, its next step (if any) in flight
            self.running.remove(request)
            self.ops.append(Finish(request.rid))

    def _tokens(self, request, drafts: int) -> int:
        """The tokens an output appends: the sampled one and the drafts accepted, trimmed at
        the request's last output."""
        accepted = self.rng.randint(0, drafts) if drafts else 0
        return max(1, min(1 + accepted, request.prompt + request.outputs - len(request.tokens)))

    def _preempt(self, request) -> None:
        super()._preempt(request)
        request.spec = False  # the scheduler clears its drafts and placeholders

    def _blocks(self, tokens: int) -> int:
        return super()._blocks(tokens + self.k)  # every allocation's k lookahead slots


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[async drafts]", build, num_ops=200, max_fuzz_ops=200)
