"""The "eagle groups" profile (`kvmanager/5[eagle groups]`, a stream of its own): EAGLE with the
draft model's KV-cache group flagged apart (`KVCacheGroupSpec(..., is_eagle_group=True)`, what
an engine sets on a drafter's layers), beside a sliding window: only the flagged group takes
EAGLE's drop (its lookup looks one of its blocks further and drops it, it caches that block
for the peek, its window's retention shifts a block), the other looks and caches as without
EAGLE; the coordinator's replay boundaries still drop a scheduler block (any group dropping).
One of the two groups flagged; in a fifth both (the same as none: every group drops). The
"eagle window" profile's sizes and engine settings (`hybrid.build_eagle`); half of the requests
with extra keys (LoRA, salt, images: `extra_keys.with_keys`). Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import hybrid
from kvfuzz.strategies.kvmanager.extra_keys import with_keys
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "eagle groups"


def build(rng: random.Random, num_ops: int) -> Trace:
    flagged = (0, 1) if rng.random() < 0.2 else (rng.choice((0, 1)),)
    trace = hybrid.build_eagle(rng, num_ops)
    return replace(trace, ops=with_keys(rng, trace.ops, trace.block_size), eagle_groups=flagged,
                   note=f"profile {PROFILE}")


PROFILES = (PROFILE,)
# 100 ops a trace (CI's 1,000 traces of a profile in about 15 s of CPU: at 130, 19 ms a trace)
GENERATOR = TraceGenerator("kvmanager/5[eagle groups]", build, num_ops=100, max_fuzz_ops=200)
