"""The "connector cuts" profile (`kvmanager/5[connector cuts]`): synchronous KV loads that fail at
a block, and the running requests vLLM's scheduler then cuts (`connector_ops.Cut`). Standard
library only.

vLLM 0.33.0's synchronous scheduler, "recompute" policy (`_update_requests_with_invalid_blocks`,
scheduler.py 3584-3682): a connector reports failed block ids with a step's output; every
running request holding one of them within its computed blocks goes back, the first in the
running queue to hold a block to that block's start, any other to its computed tokens before
the step (the block is computed again by the first), and the step's output is skipped. The
failed request's own cut is the trace's `loaded(rid, valid)` right after its synchronous
`connect`; the others' (a block shared through a prefix hit on the failed load, or its own
load's block that another request marked first) are `cut(rid, to)`. The manager is never
called for them: the blocks stay, cached, and the next steps compute the tokens again.

Block-level failures are refused by vLLM's scheduler for more than one KV cache group, so the
traces have full attention alone; the connector profile's requests (`connector._Connected`:
prompt families sharing prefixes, most admitted with external tokens, half of those loaded
asynchronously) with, after a synchronous load, its failure at a block in half (valid tokens
a few blocks, or none past the hit) and then cuts of one or two other requests (to a block
start or to any position, the lock step taking those that are at most the request's computed
tokens), now and then the failed request cut again; and an asynchronous load that fails with
a valid prefix has its failed block inside its local hit in four in ten (the same failure
reaching a waiting request's hit: `_update_requests_with_invalid_blocks` over the loading
requests, `Loaded.inside_hit`). Tight pools, the whole-request check, a
watermark, KV events and stats in some; no spec-decode padding (vLLM maps no failure with
drafts yet).

Since 2026-12-06, three traces in ten (drawn after every other draw: the others keep their ops)
are under vLLM's asynchronous scheduler (`_AsyncCutting`): the "async connector" profile's
steps with no window, the failure reported with the admission step's output, the requests cut
then beneath their step in flight, their output of the failed step skipped. Of those, three
in ten (a draw after every other: the rest keep their ops) are under the V2 runner's pipeline
of two stages (`_PipelinedCutting`, the trace's `steps_in_flight` 2).
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import async_connector, async_pipeline
from kvfuzz.strategies.kvmanager.async_connector import _AsyncConnected
from kvfuzz.strategies.kvmanager.connector import _Connected
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Cut, Loaded
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "connector cuts"


ASYNC = 0.3  # of the traces, under vLLM's asynchronous scheduler (since 2026-12-06)
PIPELINED = 0.3  # of those, under the V2 runner's pipeline of two stages (since 2026-12-06)


def build(rng: random.Random, num_ops: int) -> Trace:
    trace = _synchronous(rng, num_ops)
    # drawn after every other draw: the traces under the synchronous scheduler keep their ops
    if rng.random() < ASYNC:
        trace = async_connector.build(rng, num_ops, _AsyncCutting, PROFILE)
        # (since 2026-12-06, drawn after every other draw: the traces without keep their ops)
        if rng.random() < PIPELINED:
            return _pipelined(rng, num_ops)
    return trace


def _synchronous(rng: random.Random, num_ops: int) -> Trace:
    size = rng.choice((1, 2, 4, 4, 8))
    blocks = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    observed = rng.random() < 0.3
    gen = _Cutting(rng, size, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(blocks, size, 0, max_model_len, tuple(gen.ops[:num_ops]),
                 full_sequence_must_fit=rng.random() < 0.3,
                 watermark=0.0 if rng.random() < 0.8 else rng.choice((0.1, 0.2)),
                 events=observed, stats=observed, note=f"profile {PROFILE}")


class _Cutting(_Connected):
    """The connector's requests; a synchronous load's failure and the cuts that come with it."""

    def arrive(self) -> None:
        before = len(self.ops)
        super().arrive()
        made = [op for op in self.ops[before:] if isinstance(op, Connect)]
        rng, size = self.rng, self.block_size
        if not made or made[0].load or not made[0].external or rng.random() < 0.5:
            return
        rid = made[0].rid
        # the failed block: a few blocks past the hit valid, or none (the lock step takes the
        # block at or past the local hit, below the load's end)
        self.ops.append(Loaded(rid, rng.choice((0, size, 2 * size, rng.randint(0, 4 * size)))))
        others = [other for other in self.live if other != rid]
        for other in rng.sample(others, min(len(others), rng.choice((0, 1, 1, 2)))):
            self.ops.append(Cut(other, self._to(rng)))
        if rng.random() < 0.15:  # its own block, marked first by another: back to its end
            self.ops.append(Cut(rid, self._to(rng)))

    def loaded(self) -> None:
        """An asynchronous load reported; where it failed with a valid prefix, in four in ten
        its failed block lies inside its local hit (a block of a failed synchronous load it
        hit: `Loaded.inside_hit`), its valid tokens a block or two, below the hit."""
        before = len(self.ops)
        super().loaded()
        op = self.ops[before]
        if op.valid > 0 and self.rng.random() < 0.4:
            size = self.block_size
            self.ops[before] = Loaded(op.rid, self.rng.choice((size, 2 * size)), True)

    def _to(self, rng: random.Random) -> int:
        """A block's start, or (the request's computed tokens before its step) any position."""
        size = self.block_size
        return rng.randint(0, 4) * size if rng.random() < 0.6 else rng.randint(0, 6 * size)


class _AsyncCutting(_AsyncConnected):
    """The "async connector" profile's steps with no window (`async_connector.build`), half
    the synchronous loads failing at a block, and with each failure (reported with the
    admission step's output) one or two other running requests cut: `cut(rid, to)` to a
    block's start or any position, beneath their step in flight where one is (else after
    their `processed`, where the failed step was their last), their output of the failed step
    skipped where they were in it (no token; its placeholder left unresolved where it
    sampled: the request's `ghost`), as vLLM's `_update_requests_with_invalid_blocks` and
    `update_from_output` do (`fuzz/kvmanager/cut.py`)."""

    failing_share = 0.5

    def _process(self, step: int, scheduled: list) -> None:
        # the requests in this step (their current admission's) and whether each samples
        self.in_step = {request.rid: samples for request, epoch, samples in scheduled
                        if request.epoch == epoch and request in self.running}
        self.victims: dict[int, int] = {}
        # (the failed requests' entries first: their failure decides which outputs are skipped)
        failing = {rid for rid, (admitted, _) in self.fails.items() if admitted == step}
        super()._process(step, sorted(scheduled, key=lambda entry: entry[0].rid not in failing))

    def _failed(self, step: int, request, epoch: int, samples: bool) -> bool:
        if request.rid in self.victims:  # cut: its output of this step skipped
            return True
        if not super()._failed(step, request, epoch, samples):
            return False
        rng, size = self.rng, self.size
        others = [other for other in self.running if other is not request and
                  self._cuttable(other, step)]
        for other in rng.sample(others, min(len(others), rng.choice((1, 1, 2)))):
            to = rng.randint(0, other.computed // size) * size if rng.random() < 0.6 else \
                rng.randint(max(0, other.computed - 2 * size), other.computed)
            if other.rid in self.in_step:
                self.victims[other.rid] = to
                # nothing of it since: processed (a pipeline's: the steps to the failed one)
                self._output_processed(other, step)
                if self.in_step[other.rid]:  # its sampled token dropped, the placeholder left
                    other.pending -= 1
                    other.ghost += 1
            self.ops.append(Cut(other.rid, to))
            other.computed = to
        return True

    def _cuttable(self, request, step: int) -> bool:
        """Whether a request may be cut at `step`'s output (the guard maps every one)."""
        return True


class _PipelinedCutting(_AsyncCutting, async_pipeline._Pipelined):
    """`_AsyncCutting`'s steps under the V2 runner's pipeline of two stages
    (`async_pipeline._Pipelined`: a batch queue of three, a request's last two steps in flight,
    its decodes staggered): a failed synchronous load's `loaded` after the `processed` of its
    admission step where the trace still holds it, beneath the steps after it (one or two);
    the other requests cut beneath one step at most (`guard_async._async_cut` maps no more)."""

    def _cuttable(self, request, step: int) -> bool:
        return len([s for s in getattr(request, "flights", ()) if s > step]) <= 1


def _pipelined(rng: random.Random, num_ops: int) -> Trace:
    """A trace of `_PipelinedCutting`'s, with the pipeline's settings (`async_pipeline`)."""
    trace = async_connector.build(rng, num_ops, _PipelinedCutting, PROFILE)
    in_flight = trace.max_in_flight_tokens  # (three steps' worth where "async" has two)
    if in_flight and in_flight % 2 == 0:
        in_flight = in_flight // 2 * (async_pipeline.STAGES + 1)
    return replace(trace, steps_in_flight=async_pipeline.STAGES, max_in_flight_tokens=in_flight)


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator(f"kvmanager/5[{PROFILE}]", build, num_ops=200, max_fuzz_ops=200)
