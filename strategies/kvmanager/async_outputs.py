"""The "async outputs" profile (`kvmanager/5[async outputs]`, a stream of its own): traces shaped
as vLLM's `AsyncScheduler` makes its calls when the engine steps it with a batch queue of two
(`EngineCore.step_with_batch_queue`: step N+1 is scheduled before step N's output is processed;
docs/upstream-vllm.md, "vLLM's asynchronous scheduler, guarded"), so the lock step's
asynchronous ops (`fuzz/kvmanager/async_ops.py`) are fuzzed, not only replayed from the
guard's recordings:

- a running request whose tokens are all computed gets the slot of the token its step in
  flight samples (`placeholder`), one step after the other, the `sample` of each token coming
  when its step's output is processed (with `settle`, the scheduler's `cache_blocks` after an
  output, in most traces);
- a request that sat out a step (the step's token budget spent on others, or a rare skip) has
  nothing in flight when it is scheduled again, or when its last output comes: `processed`
  first;
- a request preempted while a step of it that samples is in flight gets that token after the
  preemption (`sample` with `stale`) and is admitted again only once it came;
- an allocation of one token (a placeholder's, or a sampled token's) that our estimate says
  the pool refuses is made first, then the preemption, then the allocation again, as the
  scheduler learns that the pool is full; since 2026-12-06 a prefill chunk's too, made again
  as a `schedule` with `again` (`_chunk_refused`);
- aborts (a `finish` with a step in flight), evictions and resets between steps.

The settings are the "async" corner profile's (`generator.settings`): a window in 80%, extra
retained tokens in half of those, retention dense, 0 or sparse, the whole-request check in
half, a watermark in a few, blocks of 1 to 8 tokens, tight pools; `max_in_flight_tokens` is
twice the step's token budget in most (the engine's, `config/vllm.py`), and prompts come from a
few families over a small vocabulary, so that prefix hits (a preempted request's own among
them) are common.

What the manager will answer is not known here: the block accounting below is this module's
own estimate (each group's blocks of the computed tokens, hits counted as new), only to put
preemptions where a tight pool makes them. Where it is wrong the trace stays valid: a refused
admission leaves its request waiting and its next `schedule` admits it again; ops of a request
in another state than estimated resolve to nothing. Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.trace import (Arrive, Evict, Finish, Placeholder, Preempt,
                                               Processed, Reset, Sample, Schedule, Settle, Trace)
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "async outputs"
VOCAB = 40  # as the corner traces': different requests often write the same block
QUEUE = 2  # the engine's batch queue: one step in flight while the next is scheduled


def build(rng: random.Random, num_ops: int, scheduler=None) -> Trace:
    size = rng.choice((1, 2, 4, 4, 8))
    window = 0 if rng.random() < 0.2 else rng.randint(2, 4 * size)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(4, 12) * size + rng.randint(0, 3)))
    retention = rng.choice((None, 0, 0) + ((rng.randint(1, 4) * size,) if window else ()))
    fit = rng.random() < 0.5
    budget = max(2, rng.choice((1, 2, 4, 8)) * size)  # the step's max_num_batched_tokens
    in_flight = 2 * budget if rng.random() < 0.7 else \
        rng.choice((None, rng.randint(1, 4 * size)))
    watermark = 0.0 if rng.random() < 0.8 else rng.choice((0.01, 0.1, 0.2))
    retained = rng.randint(1, 2 * size) if window and rng.random() < 0.5 else 0
    shaper = (scheduler or _AsyncScheduler)(rng, size, window + retained if window else 0, blocks, budget,
                             max_model_len, settles=rng.random() < 0.8)
    shaper.chunk_retries = True
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    return Trace(blocks, size, window, max_model_len, tuple(shaper.ops[:num_ops]), retention,
                 fit, in_flight, watermark, async_scheduling=True, retained=retained,
                 note=f"profile {PROFILE}")


class _Request:
    def __init__(self, rid: int, prompt: list[int], outputs: int):
        self.rid, self.tokens, self.prompt, self.outputs = rid, list(prompt), len(prompt), outputs
        self.computed = 0   # slots held, placeholders' included (the engine's computed tokens)
        self.pending = 0    # tokens sampled by steps in flight, not appended yet
        self.last = -1      # the step of its last allocation
        self.held = False   # the trace holds that allocation in flight (until `processed`)
        self.epoch = 0      # admissions so far: a step of an earlier one delivers stale output
        # an output placeholder vLLM left unresolved (a failed synchronous load's skipped
        # output, `async_connector.py`): scheduled past the tokens until a preemption
        self.ghost = 0

    @property
    def done(self) -> bool:
        return len(self.tokens) - self.prompt >= self.outputs


class _AsyncScheduler:
    # a refused prefill chunk made, then again after each preemption (since 2026-12-06; the
    # profiles built on this class that keep their traces as before leave it off)
    chunk_retries = False
    queue_size = QUEUE  # (a pipeline's is longer: `async_pipeline.py`)

    def __init__(self, rng, size: int, window: int, blocks: int, budget: int,
                 max_model_len: int, settles: bool):
        self.rng, self.size, self.window, self.blocks = rng, size, window, blocks
        self.budget, self.settles = budget, settles
        self.max_running = rng.randint(2, 6)
        families = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 8) * size)]
                    for _ in range(rng.randint(1, 3))]
        # A request fits the pool alone (else the engine never runs it) and ends a few tokens
        # before max_model_len (its placeholders then always get a position).
        longest = max(2, min(max_model_len - 3,
                                ((blocks - 1) // (2 if window else 1) - 1) * size))
        self.arrivals: list[tuple[int, _Request]] = []
        for rid in range(rng.randint(3, 10)):
            base = rng.choice(families)
            cut = min(len(base), max(0, rng.randint(0, len(base) // size) * size
                                     + rng.choice((-1, 0, 0, 0, 1))))
            tail = [rng.randrange(VOCAB) for _ in range(rng.randint(0, 2 * size))]
            prompt = ((base[:cut] + tail) or [rng.randrange(VOCAB)])[:longest - 1]
            outputs = min(rng.randint(1, 6 * size + 4), longest - len(prompt))
            arrival = 0 if rng.random() < 0.5 else rng.randint(1, 12)
            self.arrivals.append((arrival, _Request(rid, prompt, max(1, outputs))))
        self.arrivals.sort(key=lambda pair: pair[0])
        self.waiting: list[_Request] = []
        self.running: list[_Request] = []
        self.queue: list[tuple[int, list]] = []  # steps in flight, oldest first
        self.cached: set[tuple[int, ...]] = set()  # block prefixes computed so far (estimate)
        self.ops: list = []
        self.now = 0

    def step(self) -> bool:
        """Schedule a step, and once two are in flight process the older one's output (as the
        engine's batch queue does); False once every request has finished."""
        while self.arrivals and self.arrivals[0][0] <= self.now:
            request = self.arrivals.pop(0)[1]
            self.waiting.append(request)
            self.ops.append(Arrive(request.rid, tuple(request.tokens),
                                   self.rng.random() > 0.95))
        if not (self.arrivals or self.waiting or self.running or self.queue):
            return False
        self._between_steps()
        scheduled = self._schedule()
        if scheduled:
            self.queue.append((self.now, scheduled))
        # the engine waits on the oldest step once the queue is full or nothing was scheduled
        if self.queue and (len(self.queue) >= self.queue_size or not scheduled):
            self._process(*self.queue.pop(0))
        self.now += 1
        return True

    def _between_steps(self) -> None:
        """Rare: an abort with a step in flight, an eviction, a reset."""
        rng = self.rng
        if self.running and rng.random() > 0.97:
            request = rng.choice(self.running)
            self.running.remove(request)
            self._abort(request)
        if rng.random() > 0.97:
            self.ops.append(Evict(tuple(rng.randrange(48) for _ in range(rng.randint(1, 3)))))
        if rng.random() > 0.985:
            self.ops.append(Reset())  # refused while blocks are held: most of the time
            self.cached.clear()

    def _schedule(self) -> list:
        """The running requests first, in admission order, then the waiting ones while the
        budget and the running limit allow (none after a preemption this step): the requests
        of the step, each with whether it samples."""
        left, scheduled, preempted = self.budget, [], False
        for request in list(self.running):
            if request not in self.running or left <= 0 or self._staggered(request) or \
                    self.rng.random() > 0.93:
                continue  # preempted this step, out of budget, or sits this step out
            if len(request.tokens) - request.prompt + request.pending >= request.outputs:
                continue  # its last outputs are in flight: nothing more to schedule
            chunk = min(len(request.tokens) + request.pending + request.ghost - request.computed,
                        left)
            self._outputs_came(request)
            # the prompt's next chunk, or a sampled token; else the slot of the token its step
            # in flight samples
            op = Schedule(request.rid, chunk) if request.computed < len(request.tokens) else \
                Placeholder(request.rid)
            stuck = False  # a victim the scheduler may not free now: the running loop ends
            while not self._fits(request, chunk) and self.running[-1] is not request:
                op = self._refused(op, chunk)
                stuck = not self._can_preempt(self.running[-1])
                if stuck:
                    break
                self._preempt(self.running[-1])
                preempted = True
            if not stuck and not self._fits(request, chunk):
                op = self._refused(op, chunk)
                stuck = not self._can_preempt(request)
                if not stuck:
                    self._preempt(request)
                    preempted = True
                    continue
            if stuck:
                preempted = True
                break
            self.ops.append(op)
            scheduled.append(self._scheduled(request, chunk))
            left -= chunk
        if not preempted:
            self._admit_waiting(left, scheduled)
        return scheduled

    def _staggered(self, request: _Request) -> bool:
        """Whether the request waits for its decode's turn (a pipeline's: `async_pipeline`)."""
        return False

    def _outputs_came(self, request: _Request) -> None:
        """Before its allocation: its last step's output came meanwhile (`processed`)."""
        if request.held and request.last < self.now - 1:
            self.ops.append(Processed(request.rid))

    def _output_processed(self, request: _Request, step: int) -> None:
        """Its `step`'s output processed: where that was its last, nothing of it in flight."""
        if request.last == step and request.held:
            self.ops.append(Processed(request.rid))
            request.held = False

    def _admit_waiting(self, left: int, scheduled: list) -> None:
        """The step's waiting part, once its running part preempted nothing: admissions in
        queue order while the budget and the running cap leave room (the draft-token profile's
        step too: `async_drafts`)."""
        while self.waiting and left > 0 and len(self.running) < self.max_running:
            request = next((r for r in self.waiting if not r.pending), None)
            if request is None:
                break  # each waits for its stale output
            chunk = self._admit(request, left, scheduled)
            if chunk is None:
                break
            left -= chunk

    def _admit(self, request: _Request, left: int, scheduled: list) -> int | None:
        """A waiting request admitted through the cache with the budget left: the tokens it
        schedules (its step appended to `scheduled`), or None where the pool would refuse it
        (our estimate): the waiting ones wait."""
        hit = self._hit(request)
        chunk = min(len(request.tokens) - hit, left)
        if not self._fits(request, hit + chunk, whole=True):
            return None
        self._running(request, hit)
        # the budget left: the lock step caps it at the tokens the real hit leaves, as the
        # scheduler does
        self.ops.append(Schedule(request.rid, left))
        scheduled.append(self._scheduled(request, chunk))
        return chunk

    def _running(self, request: _Request, computed: int) -> None:
        self.waiting.remove(request)
        self.running.append(request)
        request.epoch += 1
        request.computed = computed

    def _can_preempt(self, request: _Request) -> bool:
        """Whether the scheduler may free a victim's blocks now (always, here)."""
        return True

    def _abort(self, request: _Request) -> None:
        """A running request aborted between steps (a step of it may be in flight)."""
        self.ops.append(Finish(request.rid))

    def _refused(self, op, chunk: int):
        """An allocation our estimate says the pool refuses: made, as the scheduler makes it
        before it preempts (and then made again): the op to make next. One token's is made
        again as it is: where the estimate is wrong and it succeeds, the one made again
        resolves to nothing (the token has its slot); a prefill chunk's (`_chunk_refused`) is
        made again with `again`, which the lock step resolves to nothing unless the chunk was
        refused (else it would take the next chunk)."""
        if chunk == 1:
            self.ops.append(op)
            return op
        return self._chunk_refused(op)

    def _chunk_refused(self, op):
        """A refused prefill chunk made (where `chunk_retries`), and the op that makes it
        again after the preemption: the released running loop retries the same
        `allocate_slots` (`Scheduler.schedule`: preempt the lowest-priority request, then
        try again)."""
        if not self.chunk_retries or not isinstance(op, Schedule):
            return op
        self.ops.append(op)
        return replace(op, again=True)

    def _scheduled(self, request: _Request, chunk: int) -> tuple:
        request.computed += chunk
        request.last, request.held = self.now, True
        full = min(request.computed, len(request.tokens)) // self.size * self.size
        for end in range(self.size, full + 1, self.size):
            self.cached.add(tuple(request.tokens[:end]))
        samples = request.computed == len(request.tokens) + request.pending + request.ghost
        request.pending += samples
        return request, request.epoch, samples

    def _process(self, step: int, scheduled: list) -> None:
        """A step's output: each request's sampled token appended (`sample`, then `settle`),
        a preempted request's as stale output; a request at its last output finishes."""
        for request, epoch, samples in scheduled:
            if request.epoch != epoch or request not in self.running:
                if samples and request in self.waiting:  # preempted with this step in flight
                    request.pending -= 1
                    self._append(request, Sample, stale=True)
                continue
            if self.settles or request.done:
                self._output_processed(request, step)
            if samples:
                request.pending -= 1
                self._append(request, Sample)
                if self.settles:
                    self.ops.append(Settle(request.rid))
            if request.done and not request.pending:
                self.running.remove(request)
                self.ops.append(Finish(request.rid))

    def _append(self, request: _Request, op, stale: bool = False) -> None:
        token = self.rng.randrange(VOCAB)
        request.tokens.append(token)
        self.ops.append(op(request.rid, token, stale) if stale else op(request.rid, token))

    def _preempt(self, request: _Request) -> None:
        self.running.remove(request)
        self.ops.append(Preempt(request.rid))
        request.computed, request.held, request.ghost = 0, False, 0
        self.waiting.insert(0, request)

    def _hit(self, request: _Request) -> int:
        """Our estimate of its prefix hit: the longest run of whole blocks computed before, the
        last token never a hit."""
        hit = 0
        while hit + self.size < len(request.tokens) and \
                tuple(request.tokens[:hit + self.size]) in self.cached:
            hit += self.size
        return hit

    def _blocks(self, tokens: int) -> int:
        """Our estimate of the blocks a request holds after `tokens` computed: full
        attention's, and the window's last few beside it."""
        full = -(-tokens // self.size)
        return full + (min(full, -(-self.window // self.size) + 1) if self.window else 0)

    def _fits(self, request: _Request, tokens: int, whole: bool = False) -> bool:
        """Whether the pool holds the request after `tokens` more (for an admission, `tokens`
        in all, and its whole prompt where the whole-request check would count it)."""
        if whole:
            need = self._blocks(max(tokens, len(request.tokens)))
        else:
            need = self._blocks(request.computed + tokens)
        held = sum(self._blocks(r.computed) for r in self.running if r is not request)
        return held + need <= self.blocks - 1


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[async outputs]", build, num_ops=200, max_fuzz_ops=200)
