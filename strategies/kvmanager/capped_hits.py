"""The "capped hits" profile (`kvmanager/5[capped hits]`, a stream of its own, made alone only:
`streams.ALONE_ONLY`): admissions whose lookup the caller caps, as vLLM 0.33.0's scheduler does
with auxiliary outputs on (`Scheduler.schedule` 1117-1127: `max_cache_hit_length` from
`AuxOutputSchedulerConnector.max_cache_hit`, the blocks its own store and the GPU both hold,
times the manager's block size, at most `num_tokens - 1`; without it, None, and the manager
takes `num_tokens - 1`).

The trace is another profile's, drawn first and kept as it is: half a corner trace of one
block size (`generator.build_corners`, a window in half), a quarter "hybrid sizes" (groups of
different block sizes, hashed below the block), a quarter "eagle window" (the hybrid
coordinator's EAGLE margin, which looks a block past the cap). Then each schedule op gets a cap
in 70% (`Schedule.max_hit`, read only at an admission): a multiple of the scheduler block
from 0 to a block past the request's prompt, the connector's shape (a cap past
`num_tokens - 1` is that, as the connector caps it). Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import generator, hybrid
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "capped hits"
SHARE = 0.7  # of the schedule ops, capped


def build(rng: random.Random, num_ops: int) -> Trace:
    draw = rng.random()
    base = generator.build_corners(rng, num_ops) if draw < 0.5 else \
        hybrid.build(rng, num_ops) if draw < 0.75 else hybrid.build_eagle(rng, num_ops)
    return replace(base, ops=capped(rng, base.ops, base.scheduler_block_size),
                   note=f"profile {PROFILE}")


def capped(rng: random.Random, ops: tuple, size: int) -> tuple:
    """`ops` with a cap on `SHARE` of the schedules, drawn after the trace's own draws."""
    prompts, out = {}, []
    for op in ops:
        if isinstance(op, Arrive):
            prompts[op.rid] = len(op.tokens)
        if isinstance(op, Schedule) and rng.random() < SHARE:
            blocks = -(-prompts.get(op.rid, 1) // size) + 1
            op = replace(op, max_hit=rng.randint(0, blocks) * size)
        out.append(op)
    return tuple(out)


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[capped hits]", build, num_ops=200, max_fuzz_ops=200)
