"""The "lone window" profile (`kvmanager/5[lone window]`, a stream of its own): a model whose
every layer is sliding window (Mistral-7B-v0.1's shape), so vLLM's engine builds one KV-cache
group, a `SlidingWindowSpec` (`kv_cache_planning.get_kv_cache_groups`: uniform specs make one
group; only a model with full attention too has its windows promoted), under the unitary
coordinator (`get_kv_cache_coordinator`: one group, caching on). EAGLE in 60% (`use_eagle`:
the one group takes the drop, flagged or not), with draft slots in most: the window's hit
needs a block more and drops it, its block mask keeps each run a block later. Windows of 2 to
4 blocks' worth, one block size hashed per block (the unitary coordinator's), retention dense,
0 (the engine's default) or sparse; the corner generator's requests
(`generator._Generator`) and the hybrid profiles' engine settings (`hybrid._engine`).
Standard library only.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager import generator, hybrid
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "lone window"


def build(rng: random.Random, num_ops: int) -> Trace:
    size = rng.choice((1, 2, 4, 4, 8))
    window = rng.randint(2, 4 * size)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    retention = rng.choice((None, 0, 0, rng.randint(1, 4) * size))
    settings = hybrid._engine(rng, size)
    if rng.random() < 0.6:
        settings["eagle"] = True
        settings["lookahead"] = rng.randint(1, 3) if rng.random() < 0.7 else 0
    if settings["async_scheduling"] and rng.random() < 0.5:
        settings["retained"] = rng.randint(1, size)
    gen = generator._Generator(rng, size, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(blocks, size, window, max_model_len, tuple(gen.ops[:num_ops]), retention,
                 **settings, lone=True, note=f"profile {PROFILE}")


PROFILES = (PROFILE,)
# 100 ops a trace, as the newer streams
GENERATOR = TraceGenerator("kvmanager/5[lone window]", build, num_ops=100, max_fuzz_ops=200)
