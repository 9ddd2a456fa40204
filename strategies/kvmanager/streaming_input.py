"""The "streaming" profile (`kvmanager/5[streaming]`, a share of the mix since 2026-12-06, alone
only before): traces shaped as vLLM's synchronous scheduler makes its calls when some requests are
resumable (streaming input: docs/upstream-vllm.md, "Streaming input (resumable requests), guarded";
the guard's `Workload(streaming=...)` sessions), so the lock step's `stream` op
(`fuzz/kvmanager/streaming.py`) is fuzzed, not only replayed from the guard's recordings:

- a resumable request that has sampled its segment's outputs stops (the token it sampled last
  is discarded: never in the trace) and keeps its blocks and computed tokens: `stream(rid,
  tokens)` where its next update is queued at the stop, else `stream(rid)` and, 0 to 2 steps
  later, `stream(rid, tokens)` with the update's new prompt tokens;
- its next allocation is a `schedule` of the waiting request with no lookup (the waiting
  loop's `else` branch), drained before the other waiting requests; refused, it waits with its
  blocks (the scheduler preempts running requests only) and the waiting loop ends;
- its end: a `finish` at the stop (a `None` update queued) or while it waits (an abort);
- beside ordinary requests, prefix hits (prompts and updates from a few families over a small
  vocabulary), preemptions (of running requests only, the latest admitted first), a sliding
  window in some traces, the whole-request check in most, a watermark in a few;
- sessions holding the whole pool while none can resume (the release's liveness hole) end as
  the guard's driver ends them: one aborted after a few idle steps.

Paused sessions count against the running limit (`max_num_active_reqs`), as in the release.
What the manager will answer is not known here: the block accounting is this module's own
estimate, only to put preemptions and refusals where a tight pool makes them; where it is wrong
the trace stays valid (ops of a request in another state resolve to nothing). Standard library
only.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import (Arrive, Decode, Finish, Preempt, Sample,
                                               Schedule, Trace)
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "streaming"
VOCAB = 40  # small: different requests (and updates) often write the same block
IDLE_STEPS = 3  # steps with nothing scheduled before a session holding blocks is aborted


def build(rng: random.Random, num_ops: int) -> Trace:
    size = rng.choice((1, 2, 4, 4, 8, 16))
    window = rng.randint(2, 4 * size) if rng.random() < 0.3 else 0
    blocks = rng.choice((rng.randint(6, 16), rng.randint(16, 48)))
    budget = max(2, rng.choice((1, 2, 4, 8)) * size)  # the step's max_num_batched_tokens
    fit = rng.random() < 0.8
    watermark = 0.0 if rng.random() < 0.85 else rng.choice((0.01, 0.1))
    shaper = _Scheduler(rng, size, window, blocks, budget)
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    return Trace(blocks, size, window, 1024, tuple(shaper.ops[:num_ops]),
                 full_sequence_must_fit=fit, max_in_flight_tokens=budget, watermark=watermark,
                 note=f"profile {PROFILE}")


class _Request:
    def __init__(self, rid: int, prompt: list[int], outputs: int, updates: list):
        self.rid, self.tokens, self.prompt, self.outputs = rid, list(prompt), len(prompt), outputs
        self.updates = updates  # (tokens, outputs) of each streaming update to come
        self.resumable = bool(updates)
        self.computed = 0       # tokens the manager holds slots for (our estimate)
        self.paused = False     # stopped, waiting for its next update
        self.update_at = -1     # the step its next update comes (paused)

    @property
    def done(self) -> bool:
        return len(self.tokens) - self.prompt >= self.outputs


class _Scheduler:
    def __init__(self, rng, size: int, window: int, blocks: int, budget: int):
        self.rng, self.size, self.window, self.blocks = rng, size, window, blocks
        self.budget, self.max_running = budget, rng.randint(2, 6)
        self.families = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 6) * size)]
                         for _ in range(rng.randint(1, 3))]
        # A request fits the pool alone with every update and output (else the engine never
        # runs it to its end).
        self.longest = max(3, ((blocks - 1) // (2 if window else 1) - 1) * size)
        self.arrivals = sorted(((0 if rng.random() < 0.5 else rng.randint(1, 12),
                                 self._request(rid)) for rid in range(rng.randint(3, 10))),
                               key=lambda pair: pair[0])
        self.waiting: list[_Request] = []   # ordinary waiting requests, first come first served
        self.holding: list[_Request] = []   # waiting with blocks: updates taken, to resume
        self.paused: list[_Request] = []    # waiting for an update (or their end)
        self.running: list[_Request] = []
        self.ops: list = []
        self.now = self.idle = 0
        self.preempted = False

    def _tokens(self, count: int) -> list[int]:
        """`count` tokens, often a family's (prefix hits across requests and updates)."""
        if self.rng.random() < 0.5:
            family = self.rng.choice(self.families)
            start = self.rng.randrange(len(family)) // self.size * self.size
            return (family[start:] + [self.rng.randrange(VOCAB) for _ in range(count)])[:count]
        return [self.rng.randrange(VOCAB) for _ in range(count)]

    def _request(self, rid: int) -> _Request:
        rng, size = self.rng, self.size
        base = rng.choice(self.families)
        cut = min(len(base), rng.randint(0, len(base) // size) * size + rng.choice((0, 0, 1)))
        prompt = (base[:cut] + [rng.randrange(VOCAB) for _ in range(rng.randint(0, 2 * size))]
                  or [rng.randrange(VOCAB)])[:self.longest // 2]
        left = self.longest - len(prompt)
        outputs = max(1, min(rng.randint(1, 3 * size + 2), left // 2))
        left -= outputs + 1
        updates = []
        if rng.random() < 0.6:  # resumable: 1 to 3 updates, as far as the pool allows
            for _ in range(rng.randint(1, 3)):
                new, more = rng.randint(1, 3 * size + 1), rng.randint(1, 2 * size + 1)
                if new + more + 1 > left:
                    break
                updates.append((self._tokens(new), more))
                left -= new + more + 1
        return _Request(rid, prompt, outputs, updates)

    def step(self) -> bool:
        """One scheduler step; False once every request has finished."""
        while self.arrivals and self.arrivals[0][0] <= self.now:
            request = self.arrivals.pop(0)[1]
            self.waiting.append(request)
            self.ops.append(Arrive(request.rid, tuple(request.tokens)))
        self._updates()
        if not (self.arrivals or self.waiting or self.holding or self.paused or self.running):
            return False
        left = self._run_running(self.budget)
        if not self.preempted:  # no admission in a step that preempted
            left = self._run_waiting(left)
        scheduled = left < self.budget
        self._sample()
        self._stalled(scheduled)
        self.now += 1
        return True

    def _updates(self) -> None:
        """Updates (or ends) that come to paused sessions this step."""
        for request in [r for r in self.paused if r.update_at <= self.now]:
            self.paused.remove(request)
            request.paused = False
            if not request.updates:  # its end comes while it waits: an abort
                self.ops.append(Finish(request.rid))
                continue
            self._take_update(request)
            self.holding.append(request)

    def _take_update(self, request: _Request) -> None:
        new, more = request.updates.pop(0)
        request.tokens += new
        request.prompt, request.outputs = len(request.tokens), more
        self.ops.append(Stream(request.rid, tuple(new)))

    def _room(self, request: _Request, left: int) -> int | None:
        """The tokens `request` steps next (its rest, at most `left`), once the requests after
        it were preempted until they fit; None where it was preempted itself (the scheduler's
        preemption of the running queue's tail)."""
        need = min(len(request.tokens) - request.computed, left)
        while not self._fits(request, need) and self.running[-1] is not request:
            self._preempt(self.running[-1])
        if not self._fits(request, need):
            self._preempt(request)
            return None
        return need

    def _run_running(self, left: int) -> int:
        self.preempted = False
        for request in list(self.running):
            if request not in self.running or left <= 0:
                continue
            need = self._room(request, left)
            if need is None:
                continue
            if request.computed < len(request.tokens) - 1 or request.computed < request.prompt:
                self.ops.append(Schedule(request.rid, need))  # a prompt's next chunk
            else:
                need = 1
                self.ops.append(Decode(request.rid, request.tokens[-1]))
            request.computed += need
            left -= need
        return left

    def _run_waiting(self, left: int) -> int:
        """Sessions holding blocks first (no lookup), then the waiting requests, while the
        budget and the running limit (paused sessions counted) allow; a refusal ends it."""
        while left > 0 and len(self.running) + len(self.paused) < self.max_running:
            queue = self.holding or self.waiting
            if not queue:
                break
            request = queue[0]
            if queue is self.holding:
                chunk = min(len(request.tokens) - request.computed, left)
                if not self._fits(request, chunk, whole=True):
                    break
                request.computed += chunk
            else:
                hit = self._hit(request)
                chunk = min(len(request.tokens) - hit, left)
                if not self._fits(request, hit + chunk, whole=True):
                    break
                request.computed = hit + chunk
            queue.pop(0)
            self.running.append(request)
            self.ops.append(Schedule(request.rid, left if queue is self.waiting else chunk))
            left -= chunk
        return left

    def _sample(self) -> None:
        """Each running request whose tokens are all computed samples a token; at its
        segment's last output a resumable one stops (that token discarded), any other ends."""
        for request in list(self.running):
            if request.computed < len(request.tokens):
                continue
            if not request.done:
                request.tokens.append(self.rng.randrange(VOCAB))
                continue
            self.running.remove(request)
            if not request.resumable or (not request.updates and self.rng.random() < 0.6):
                self.ops.append(Finish(request.rid))  # its end queued at the stop
            elif request.updates and self.rng.random() < 0.4:
                self._take_update(request)   # its update queued: taken at the stop
                self.holding.append(request)
            else:
                self.ops.append(Stream(request.rid))  # it waits for its next update
                request.paused, request.update_at = True, self.now + self.rng.randint(1, 3)
                self.paused.append(request)

    def _stalled(self, scheduled: bool) -> None:
        """The liveness hole: nothing scheduled for a few steps while sessions hold blocks:
        one of them aborted, as the guard's driver does."""
        self.idle = 0 if scheduled or not self.holding else self.idle + 1
        if self.idle >= IDLE_STEPS:
            request = self.holding.pop(0)
            self.ops.append(Finish(request.rid))
            self.idle = 0

    def _preempt(self, request: _Request) -> None:
        if request.computed == len(request.tokens) - 1 and len(request.tokens) > request.prompt:
            self.ops.append(Sample(request.rid, request.tokens[-1]))  # sampled, no slot yet
        self.running.remove(request)
        self.ops.append(Preempt(request.rid))
        self.preempted = True
        request.computed = 0
        self.waiting.insert(0, request)

    def _hit(self, request: _Request) -> int:
        """Our estimate of its prefix hit: whole blocks another request computed, the last
        token never a hit."""
        held = [r.tokens[:r.computed] for r in (*self.running, *self.holding, *self.paused)]
        hit = 0
        while hit + self.size < len(request.tokens) and any(
                tokens[:hit + self.size] == request.tokens[:hit + self.size] for tokens in held):
            hit += self.size
        return hit

    def _blocks(self, tokens: int) -> int:
        full = -(-tokens // self.size)
        return full + (min(full, -(-self.window // self.size) + 1) if self.window else 0)

    def _fits(self, request: _Request, tokens: int, whole: bool = False) -> bool:
        need = self._blocks(max(tokens, len(request.tokens)) if whole else
                            request.computed + tokens)
        held = sum(self._blocks(r.computed) for r in (*self.running, *self.holding, *self.paused)
                   if r is not request)
        return held + need <= self.blocks - 1


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[streaming]", build, num_ops=200, max_fuzz_ops=200)
