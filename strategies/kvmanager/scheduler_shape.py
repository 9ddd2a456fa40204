"""Traces shaped as vLLM's own v1 scheduler shapes its calls (as recorded from it:
`corpus/kvmanager-ebf8ecc276af2472.json`, `fuzz/kvmanager/vllm_scheduler.py`): step by step,
the running requests first, in admission order (a decode each, or the next chunk of a prompt
within the step's token budget), then the waiting ones first come first served while the
budget and the running limit allow; a request whose next block does not fit preempts the
latest admitted one (its sampled token a `sample`), which waits again at the head of the
queue; a request ends at its own number of output tokens. Prompts share whole-block prefixes
within families; arrivals come over the first steps; the engine's settings are the defaults
the scheduler runs with (the whole-request check on, no window, no watermark).

What the manager will answer is not known here: the block accounting below is this module's
own estimate, only to put preemptions where a tight pool makes them. Where the estimate is
wrong the trace stays valid (a refused admission leaves its request waiting; ops of a request
that is not running resolve to nothing).
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.trace import (Arrive, Decode, Finish, Preempt, Sample,
                                               Schedule, Trace)

VOCAB = 1000  # as the recorded sessions' model: collisions are prefix sharing, not chance


class _Request:
    def __init__(self, rid: int, prompt: list[int], outputs: int):
        self.rid, self.tokens, self.prompt, self.outputs = rid, list(prompt), len(prompt), outputs
        self.computed = 0          # tokens the manager holds slots for, as far as we estimate

    @property
    def done(self) -> bool:
        return len(self.tokens) - self.prompt >= self.outputs


def build(rng: random.Random, num_ops: int) -> Trace:
    block_size = rng.choice((4, 8, 16, 16))
    blocks = rng.randint(8, 40)
    budget = rng.choice((2, 4, 8)) * block_size          # the step's max_num_batched_tokens
    shaper = _Scheduler(rng, block_size, blocks, budget, max_running=rng.randint(2, 8))
    for _ in range(50 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    return Trace(blocks, block_size, 0, 1024, tuple(shaper.ops[:num_ops]),
                 full_sequence_must_fit=True, max_in_flight_tokens=budget)


class _Scheduler:
    def __init__(self, rng, block_size: int, blocks: int, budget: int, max_running: int):
        self.rng, self.bs, self.blocks, self.budget = rng, block_size, blocks, budget
        self.max_running = max_running
        families = [[rng.randrange(3, VOCAB) for _ in range(block_size * rng.randint(1, 5))]
                    for _ in range(rng.randint(1, 3))]
        self.arrivals: list[tuple[int, _Request]] = []
        # A request fits the pool alone with its outputs (else the engine never runs it).
        longest = max(2, (blocks - 1) * block_size - 40)
        for rid in range(rng.randint(4, 16)):
            shared = rng.choice(families) if rng.random() < 0.8 else []
            own = [rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 6 * block_size))]
            prompt = (shared + own)[:longest - 1]
            step = 0 if rng.random() < 0.5 else rng.randint(1, 12)
            self.arrivals.append((step, _Request(rid, prompt, rng.randint(1, 40))))
        self.arrivals.sort(key=lambda pair: pair[0])
        self.waiting: list[_Request] = []
        self.running: list[_Request] = []
        self.ops: list = []
        self.now = 0

    def step(self) -> bool:
        """One scheduler step; False once every request has finished."""
        while self.arrivals and self.arrivals[0][0] <= self.now:
            request = self.arrivals.pop(0)[1]
            self.waiting.append(request)
            self.ops.append(Arrive(request.rid, tuple(request.tokens)))
        if not (self.arrivals or self.waiting or self.running):
            return False
        left = self.budget
        for request in list(self.running):
            if request not in self.running or left <= 0:
                continue
            need = len(request.tokens) - request.computed
            while not self._fits(request, min(need, left)) and self.running[-1] is not request:
                self._preempt(self.running[-1])
            if not self._fits(request, min(need, left)):
                self._preempt(request)
                continue
            if request.computed < request.prompt:  # the prompt's next chunk
                chunk = min(need, left)
                self.ops.append(Schedule(request.rid, chunk))
            else:  # its sampled token's slot
                chunk = 1
                self.ops.append(Decode(request.rid, request.tokens[-1]))
            request.computed += chunk
            left -= chunk
        while self.waiting and left > 0 and len(self.running) < self.max_running:
            request = self.waiting[0]
            chunk = min(len(request.tokens), left)
            if not self._fits(request, chunk, whole=True):
                break
            self.waiting.pop(0)
            self.running.append(request)
            self.ops.append(Schedule(request.rid, chunk))
            request.computed = chunk
            left -= chunk
        self._sample()
        self.now += 1
        return True

    def _sample(self) -> None:
        """A token for each running request whose tokens are all computed; finished ones end."""
        for request in list(self.running):
            if request.computed < len(request.tokens):
                continue
            if request.done:
                self.running.remove(request)
                self.ops.append(Finish(request.rid))
            else:
                request.tokens.append(self.rng.randrange(3, VOCAB))

    def _used(self) -> int:
        return sum(-(-r.computed // self.bs) for r in self.running)

    def _fits(self, request, chunk: int, whole: bool = False) -> bool:
        """Our estimate: the blocks the request holds after `chunk` more tokens (its whole
        prompt for an admission, as the engine's whole-request check counts) fit in the pool."""
        tokens = len(request.tokens) if whole else request.computed + chunk
        held = -(-request.computed // self.bs) if request in self.running else 0
        return self._used() - held + -(-tokens // self.bs) <= self.blocks - 1

    def _preempt(self, request) -> None:
        if request.computed == len(request.tokens) - 1 and len(request.tokens) > request.prompt:
            self.ops.append(Sample(request.rid, request.tokens[-1]))  # sampled, no slot yet
        self.running.remove(request)
        self.ops.append(Preempt(request.rid))
        request.computed = 0
        self.waiting.insert(0, request)
