"""The KV-cache-manager judge's handlers of asynchronous scheduling's own ops, mixed into
`KVManagerLockstep`: what vLLM's `AsyncScheduler` makes the manager see that a synchronous
scheduler never does (docs/upstream-vllm.md, "vLLM's own scheduler, guarded").

- `placeholder`: a running request whose tokens are all computed is scheduled again before the
  output of its step in flight is processed: `allocate_slots(request, 1)` for the token that
  step samples, over the request's tokens as they are (its `num_tokens` one short of the
  positions it now holds slots for; what it caches stops at its tokens). The request then
  counts one token more computed than it has, until the `sample` of that token;
- `processed`: the output of the request's last step is processed before its next
  allocation, so none of its tokens are in flight then (the trace's asynchronous mode
  otherwise holds the previous allocation in flight at the next); no call;
- a `sample` with `stale`: a preempted request's step in flight delivers its token after the
  preemption (vLLM keeps that "stale output"); the waiting request has it at its admission.

Under a pipeline (the trace's `steps_in_flight` n > 1: vLLM's V2 model runner over n stages, its
batch queue n + 1) a request's last n allocations may be in flight at its next (back-to-back
prefill chunks; decodes are staggered n steps apart): the lock step keeps them as a queue,
oldest first, each allocation adding its own and dropping what is older than the last n (the
engine processed those); `processed` pops the oldest. With one step in flight (every trace
before), the queue is that step alone: as before.

With speculative decoding (vLLM 0.33.0's `AsyncScheduler._update_after_schedule`: `1 +
num_spec_tokens` output placeholders a step that samples, the drafts placeholders the worker
fills in), a `placeholder` carries `drafts`: the request counts them computed past its tokens
while the step is in flight, and the `settle` after the step's output (its accepted tokens
`sample`s first) rolls back the rejected ones (`rejected`), as `update_from_output` does.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles
from kvfuzz.fuzz.kvmanager import flight_finish
from kvfuzz.fuzz.kvmanager.streaming import DROPPED_PROCESSED
from kvfuzz.strategies.kvmanager.trace import Placeholder, Processed

# The asynchronous scheduler's own ops ("async outputs" makes them); then those of its draft
# tokens (the guard's recordings, and since 2026-12-05 the "async drafts" profile)
ONE_TOKEN_EVENTS = ("placeholder slot (token in flight)", "placeholder slot into a new block",
                    "output processed, nothing in flight", "stale token after a preemption")
# the running loop's retry of a refused prefill chunk, after the preemption it made
CHUNK_AGAIN = "prefill chunk refused, made again after a preemption"
# a pipeline's (`steps_in_flight` > 1): an allocation with two steps of it in flight, and the
# output of the older one processed while the newer one is still in flight
PIPELINE_EVENTS = ("allocation with two steps in flight", "older step processed, one in flight")
DRAFT_EVENTS = ("placeholder slots with draft tokens", "draft slots past a block's end",
                "rejected drafts rolled back", "draft tokens after a step sat out",
                "padded rows in flight until the output")
EVENTS = ONE_TOKEN_EVENTS + DRAFT_EVENTS + (CHUNK_AGAIN,) + PIPELINE_EVENTS + \
    flight_finish.EVENTS


def flown(flights: list, tokens: int, steps: int) -> list:
    """A request's steps in flight (their tokens, oldest first) after an allocation of `tokens`
    (none for an allocation of a hit alone): that one, and of those before it what a pipeline
    of `steps` (the trace's `steps_in_flight`) keeps in flight; the older ones were processed.
    With one step: the allocation's alone, as the trace's asynchronous mode always had it."""
    return [n for n in (flights + [tokens])[-steps:] if n]


def taken_out(flights: list, tokens: int, steps: int) -> tuple[list, int]:
    """`flown`'s steps in flight, and the tokens of those it took out of flight: their output
    comes after the allocation in the engine (a finish before it counts them in flight:
    `flight_finish.py`)."""
    kept = flown(flights, tokens, steps)
    return kept, sum(flights) + tokens - sum(kept)


class Flights:
    """A request's steps in flight (`flights`, oldest first) and their tokens (`in_flight`),
    mixed into the lock step's and the guard's requests. Setting `in_flight` makes it the only
    step in flight (0: none): an admission's, or after a preemption or a KV load."""

    flights: list

    @property
    def in_flight(self) -> int:
        return sum(self.flights)

    @in_flight.setter
    def in_flight(self, tokens: int) -> None:
        self.flights = [tokens] if tokens else []
        self.older = 0  # (`flight_finish.py`)


class AsyncOps:
    """Mixed into `KVManagerLockstep` (its requests, trace and `_allocation`)."""

    @handles(Placeholder)
    def placeholder(self, op: Placeholder):
        request = self.requests.get(op.rid)
        # Its tokens all computed; past them, only the drafts of a step in flight (with
        # speculative decoding), which the request counts computed until they are resolved.
        # With drafts, also a decode of its last token with nothing in flight (a request that
        # sat out a step). The scheduler keeps the token, the drafts and the one sampled after
        # them within max_model_len (`max_model_len - num_computed_tokens - 1` at most).
        new = 1 + op.drafts
        if request is None or request.status != "running" or \
                not self.trace.async_scheduling or \
                request.computed < len(request.tokens) - (1 if op.drafts else 0) or \
                request.computed + new >= self.trace.max_model_len:
            return
        if request.computed < len(request.tokens):
            self.count("draft tokens after a step sat out")
        self.count("placeholder slot (token in flight)")
        if request.computed % self.trace.block_size == 0:
            self.count("placeholder slot into a new block")
        if op.drafts:
            self.count("placeholder slots with draft tokens")
            if request.computed // self.trace.block_size != \
                    (request.computed + new - 1) // self.trace.block_size:
                self.count("draft slots past a block's end")
        drafts = f" and {op.drafts} drafts" if op.drafts else ""
        yield Call(f"allocate_slots(r{op.rid}, {new}): the slot of the token in flight{drafts}")
        return (yield from self._allocation(op.rid, request, new, 0, None))

    @handles(Processed)
    def processed(self, op: Processed):
        request = self.requests.get(op.rid)
        # (a waiting request with tokens in flight: a streaming stop's, its step's output
        # dropped when it comes: `streaming.py`)
        if request is None or request.status not in ("running", "waiting") or \
                not request.in_flight:
            return
        self.count("output processed, nothing in flight" if len(request.flights) == 1 else
                   "older step processed, one in flight")
        if request.status == "waiting":
            self.count(DROPPED_PROCESSED)
        request.flights.pop(0)  # its oldest step's output (a pipeline's: a newer one flies on)
        request.older = 0  # (and any before it: outputs come in order; `flight_finish.py`)
        left = f"{request.in_flight} tokens" if request.flights else "no tokens"
        yield Call(f"r{op.rid}'s step output processed: {left} in flight", None,
                   oracle=None)

    def flown(self, request, tokens: int) -> None:
        """After an allocation of `tokens` (a pipeline's second step in flight counted)."""
        if len(request.flights) > 1:
            self.count("allocation with two steps in flight")
        request.flights, request.older = taken_out(request.flights, tokens,
                                                   self.trace.steps_in_flight)

    def made_again(self, request) -> bool:
        """Whether a `schedule` with `again` (a running request's prefill chunk made again)
        applies: its last allocation refused, and a preemption made since (vLLM's running
        loop preempts the lowest-priority request, then retries the same `allocate_slots`)."""
        if request.refused is None or self.preemptions == request.refused:
            return False
        self.count(CHUNK_AGAIN)
        return True

    def rows_held(self, rows: int, asked: bool) -> bool:
        """Whether a padded admission's draft `rows` stay counted computed and in flight until
        the step's output, whose `settle` rolls them back: asked (the op's `rows_in_flight`)
        under asynchronous scheduling, as vLLM counts them; else rolled back at once."""
        held = bool(rows) and asked and self.trace.async_scheduling
        if held:
            self.count("padded rows in flight until the output")
        return held

    def rolled_back(self, op, request) -> bool:
        """Whether a `settle` applies as to its `rejected` drafts (speculative decoding under
        asynchronous scheduling): rolled back from the request's computed tokens, which still
        cover its tokens but the last sampled one after it (the tokens of a step in flight
        past them); True without any."""
        if not op.rejected:
            return True
        if request.computed - op.rejected < len(request.tokens) - 1:
            return False
        self.count("rejected drafts rolled back", op.rejected)
        request.computed -= op.rejected
        return True

    def stale_token(self, op, request) -> bool:
        """Whether `op` (a `sample` with `stale`) applies: a waiting request preempted before,
        with nothing computed and room for the token."""
        return request.status == "waiting" and request.preempted and not request.computed \
            and len(request.tokens) < self.trace.max_model_len
