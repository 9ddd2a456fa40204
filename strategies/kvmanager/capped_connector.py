"""The "capped connector" profile (`kvmanager/5[capped connector]`, a stream of its own, made
alone only: `streams.ALONE_ONLY`): a KV connector's admissions whose lookup the caller caps, as
vLLM 0.33.0's scheduler does with auxiliary outputs on (`Scheduler.schedule` 1117-1127: the
auxiliary-output connector's `max_cache_hit` passed to `get_computed_blocks_for_connector`, and
its `cap_external_hit` at 1189-1197, which the lock step applies: `fuzz/kvmanager/
connector_cap.py`).

The trace is a connector profile's, drawn first and kept as it is: half "connector", a quarter
"connector sizes" (groups of different block sizes), a quarter "async connector" (the
asynchronous scheduler's). Then each admission op (`connect`, `schedule`) gets a cap in 70%
(`max_hit`, read only at an admission): a multiple of full attention's block (the connector's
group, whose blocks `max_cache_hit` counts) from 0 to a block past the request's prompt. Not
beside a Mamba "align" group (refused by name: its lookups keep the manager's own cap).
Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import async_connector, connector, connector_sizes
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "capped connector"
SHARE = 0.7  # of the admission ops, capped


def build(rng: random.Random, num_ops: int) -> Trace:
    draw = rng.random()
    base = connector.build(rng, num_ops) if draw < 0.5 else \
        connector_sizes.build(rng, num_ops) if draw < 0.75 else \
        async_connector.build(rng, num_ops)
    return replace(base, ops=capped(rng, base.ops, base.block_size), note=f"profile {PROFILE}")


def capped(rng: random.Random, ops: tuple, size: int) -> tuple:
    """`ops` with a cap on `SHARE` of the admission ops, drawn after the trace's own draws."""
    prompts, out = {}, []
    for op in ops:
        if isinstance(op, Arrive):
            prompts[op.rid] = len(op.tokens)
        if isinstance(op, (Connect, Schedule)) and rng.random() < SHARE:
            blocks = -(-prompts.get(op.rid, 1) // size) + 1
            op = replace(op, max_hit=rng.randint(0, blocks) * size)
        out.append(op)
    return tuple(out)


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[capped connector]", build, num_ops=200,
                           max_fuzz_ops=200)
