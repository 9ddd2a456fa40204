"""The "async pipeline" profile (`kvmanager/5[async pipeline]`): the "async outputs" traces
(`async_outputs.py`) as vLLM's `AsyncScheduler` makes its calls under the V2 model runner over a
pipeline of two stages (docs/upstream-vllm.md, "vLLM's V2 model runner under a pipeline"): the
engine's batch queue is three, so two steps are in flight when the next is scheduled, and a
request that sampled waits two steps for its next one (`decode_stagger`,
`next_decode_eligible_step`); prefill chunks back to back are not staggered, so a request's
chunk is scheduled with its two previous chunks in flight. The trace's `steps_in_flight` is 2:
the lock step keeps a request's last two allocations in flight and a `processed` pops the
oldest, made here for each step of it the engine processed, before its next allocation or
(where the trace settles) when an output comes, as the guard makes them from the engine's
`num_in_flight_tokens`. Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import async_outputs
from kvfuzz.strategies.kvmanager.trace import Processed, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "async pipeline"
STAGES = 2  # the pipeline's: the decode stagger, and a request's steps in flight


def build(rng: random.Random, num_ops: int) -> Trace:
    trace = async_outputs.build(rng, num_ops, scheduler=_Pipelined)
    in_flight = trace.max_in_flight_tokens
    # the engine's is three steps' worth (`VllmConfig.max_in_flight_tokens`) where the "async
    # outputs" one has two
    if in_flight and in_flight % 2 == 0:
        in_flight = in_flight // 2 * (STAGES + 1)
    return replace(trace, steps_in_flight=STAGES, max_in_flight_tokens=in_flight,
                   note=f"profile {PROFILE}")


class _Pipelined(async_outputs._AsyncScheduler):
    """The engine's batch queue of `STAGES + 1`. Each request's `flights`: the steps of it the
    trace holds in flight (oldest first: its last `STAGES` allocations, less those
    `processed`); `eligible`: the step its next decode waits for."""

    queue_size = STAGES + 1

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.chunk_retries = True

    def _staggered(self, request) -> bool:
        return self.now < getattr(request, "eligible", 0)

    def _outputs_came(self, request) -> None:
        # the engine processed the steps that left its queue: a `processed` for each, oldest
        # first
        flying = {step for step, _ in self.queue}
        flights = getattr(request, "flights", [])
        while flights and flights[0] not in flying:
            self.ops.append(Processed(request.rid))
            flights.pop(0)

    def _output_processed(self, request, step: int) -> None:
        flights = getattr(request, "flights", [])
        while flights and flights[0] <= step:
            self.ops.append(Processed(request.rid))
            flights.pop(0)

    def _scheduled(self, request, chunk: int) -> tuple:
        scheduled = super()._scheduled(request, chunk)
        request.flights = (getattr(request, "flights", []) + [self.now])[-STAGES:]
        if scheduled[2]:  # it samples: its next step waits (vLLM's decode stagger)
            request.eligible = self.now + STAGES
        return scheduled

    def _preempt(self, request) -> None:
        super()._preempt(request)
        request.flights, request.eligible = [], 0


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[async pipeline]", build, num_ops=200, max_fuzz_ops=200)
