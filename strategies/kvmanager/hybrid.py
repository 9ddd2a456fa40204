"""The "hybrid sizes" profile (`kvmanager/5[hybrid sizes]`, a stream of its own): vLLM's hybrid
coordinator over groups of different block sizes, hashed per fewer tokens than a block.
Standard library only.

A full-attention group of 2 to 8 tokens per block beside a sliding-window group of another
block size (or the same, hashed finer), the hash block a common divisor of both (often below
both), so the manager schedules in blocks of their least common multiple: hits are cut to it,
a window's run must end on it, a step caches only up to it, a dense sliding-window group keeps
only a window's worth before each scheduler block, and full attention registers the prompt's
last hash boundary inside a block as a partial entry (vLLM's `cache_partial_block`). The
requests are the corner generator's (`generator._Generator`), their prompts cut around the
scheduler block; the engine's settings vary as in the corner profiles (retention a multiple of
the scheduler block).
"""

from __future__ import annotations

import math
import random

from kvfuzz.strategies.kvmanager.generator import _Generator
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

# (full attention's block size, the sliding window's), the scheduler block at most 16 tokens
SIZES = ((2, 4), (4, 2), (4, 8), (8, 4), (2, 8), (8, 2), (4, 4), (8, 8), (2, 2), (4, 16))


def build(rng: random.Random, num_ops: int) -> Trace:
    full, swa = rng.choice(SIZES)
    common = math.gcd(full, swa)
    # a hash block below the block size in most traces (always where the sizes are equal)
    hashed = rng.choice([d for d in (1, 2, 4) if common % d == 0 and (d < common or
                                                                       full != swa)])
    scheduler = math.lcm(full, swa)
    window = rng.randint(2, 3 * swa)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 48)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 8) * scheduler + rng.randint(0, 3)))
    retention = rng.choice((None, None, 0, rng.randint(1, 3) * scheduler))
    observed = rng.random() < 0.4
    in_flight = rng.random() < 0.2
    settings = {"events": observed, "stats": observed,
                "lookahead": rng.randint(1, 3) if rng.random() < 0.2 else 0,
                "async_scheduling": in_flight,
                "retained": rng.randint(1, swa) if in_flight and rng.random() < 0.5 else 0}
    gen = _Generator(rng, scheduler, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(blocks, full, window, max_model_len, tuple(gen.ops[:num_ops]), retention,
                 rng.random() < 0.5, None if rng.random() < 0.7 else rng.randint(1, 2 * swa),
                 0.0 if rng.random() < 0.8 else rng.choice((0.1, 0.2)), **settings,
                 window_block_size=swa if swa != full else 0,
                 hash_block_size=hashed if hashed != full else 0, note="profile hybrid sizes")


NAME = "kvmanager/5[hybrid sizes]"  # a stream of its own beside kvmanager/5
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
