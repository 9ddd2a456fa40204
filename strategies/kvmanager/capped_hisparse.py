"""The "capped hisparse" profile (`kvmanager/5[capped hisparse]`, a stream of its own, made alone
only: `streams.ALONE_ONLY`, since 2026-12-07): the caller's cap on the lookups beside HiSparse's
groups, as vLLM 0.33.0's scheduler passes it with auxiliary outputs on (an MoE sparse-MLA model
on the V2 runner, prefix caching on: nothing excludes HiSparse there). The cap bounds the
manager's lookup, the source group's retained host hit with it, and drops a second connector's
imported tokens unless they end on a block within it (`fuzz/kvmanager/hisparse_cap.py`).

The trace is another HiSparse profile's, drawn first and kept as it is: 40% "hisparse import"
(a second connector's imports into the host pool, whose external tokens the cap keeps or
drops), 20% each "hisparse", "hisparse lag" and "hisparse cow" (a Mamba "align" group beside
the four, hashed per fewer tokens than a block: the exact hit, capped). Then 70% of the
admission ops (`connect`, `schedule`) get a cap (`capped_connector.capped`): a multiple of the
block from 0 to a block past the request's prompt. Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.capped_connector import capped
from kvfuzz.strategies.kvmanager.hisparse import build_hisparse
from kvfuzz.strategies.kvmanager.hisparse_cow import build_cow
from kvfuzz.strategies.kvmanager.hisparse_import import build_import
from kvfuzz.strategies.kvmanager.hisparse_lag import build_lag
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "capped hisparse"


def build(rng: random.Random, num_ops: int) -> Trace:
    draw = rng.random()
    base = build_import(rng, num_ops) if draw < 0.4 else \
        build_hisparse(rng, num_ops) if draw < 0.6 else \
        build_lag(rng, num_ops) if draw < 0.8 else build_cow(rng, num_ops, ahead=False)
    return replace(base, ops=capped(rng, base.ops, base.block_size), note=f"profile {PROFILE}")


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[capped hisparse]", build, num_ops=200,
                           max_fuzz_ops=200)
