"""The "two windows" profile (`kvmanager/5[two windows]`, a stream of its own): a model whose
layers are all sliding window, in two window sizes, so vLLM's engine builds two KV-cache groups,
each a `SlidingWindowSpec` (`kv_cache_planning.get_kv_cache_groups`: the specs are neither
uniform nor of one uniform type, `SlidingWindowSpec.is_uniform_with_collection` wanting one
window size; only a model with full attention too has its windows promoted), under the hybrid
coordinator. With no full-attention group first its `find_longest_cache_hit` is not the "simple
hybrid" and searches the fixed point of both groups' hits, pass after pass; with EAGLE (in 85%:
both groups drop, none flagged) a group drops once per candidate length. Block sizes as "hybrid
sizes" draws them (group 0's, group 1's: in 85% they differ, the scheduler block their least common
multiple), hashed per their greatest common divisor or less; windows of 2 to 3 blocks' worth
each, never equal; retention dense, 0 or sparse; the corner generator's requests cut around the
scheduler block (`hybrid._ops`) and the hybrid profiles' engine settings (`hybrid._engine`).
Standard library only.
"""

from __future__ import annotations

import math
import random

from kvfuzz.strategies.kvmanager import hybrid
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "two windows"
UNEQUAL = tuple((a, b) for a, b in hybrid.SIZES if a != b)


def build(rng: random.Random, num_ops: int) -> Trace:
    # groups of different block sizes in most (with one block size the first window's hit is
    # the second's to the block, and a pass more changes nothing: seen in a probe of the release)
    first_size, size = rng.choice(UNEQUAL if rng.random() < 0.85 else hybrid.SIZES)
    scheduler, common = math.lcm(first_size, size), math.gcd(first_size, size)
    hashed = rng.choice([d for d in (1, 2, 4) if common % d == 0 and d <= common])
    first = rng.randint(2, 3 * first_size)
    window = rng.choice([w for w in range(2, 3 * size + 2) if w != first])
    blocks = rng.choice((rng.randint(6, 16), rng.randint(16, 64), rng.randint(16, 64)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 8) * scheduler + rng.randint(0, 3)))
    retention = rng.choice((None, None, 0, rng.randint(1, 3) * scheduler))
    settings = hybrid._engine(rng, size)
    if rng.random() < 0.85:
        settings["eagle"] = True
        settings["lookahead"] = rng.randint(1, 3) if rng.random() < 0.7 else 0
    if settings["async_scheduling"] and rng.random() < 0.5:
        settings["retained"] = rng.randint(1, min(first_size, size))
    return Trace(blocks, first_size, window, max_model_len,
                 hybrid._ops(rng, scheduler, max_model_len, num_ops), retention, **settings,
                 window_block_size=size if size != first_size else 0,
                 hash_block_size=hashed if hashed != first_size else 0, first_window=first,
                 note=f"profile {PROFILE}")


PROFILES = (PROFILE,)
# 100 ops a trace, as the newer streams
GENERATOR = TraceGenerator("kvmanager/5[two windows]", build, num_ops=100, max_fuzz_ops=200)
