"""The "connector sizes" profile (`kvmanager/5[connector sizes]`, a stream of its own: a share of
the mix, alone only until merged; `--profile "connector sizes"` alone): a KV connector in front of
groups of different block sizes, the "connector" profile's requests (`connector._Connected`) over
the "hybrid sizes" layout (`hybrid.SIZES`: full attention in blocks of 2 to 8 tokens beside a
sliding window in blocks of another size, the hash block a common divisor of both, the scheduler
block their least common multiple). Standard library only.

What vLLM 0.33.0 does there (docs/upstream-vllm.md, "KV connectors"): the local hit is aligned
to the scheduler block; each group gets its own blocks for cdiv(hit + external, its block size)
(none where the window skips every external token), so external tokens may end inside the
larger group's block; a failed asynchronous load with several groups comes as
`failed_recving` (`Scheduler._handle_invalid_blocks` refuses block-level failures with more
than one group): `num_computed_tokens` 0, the request freed and admitted again, so every
`loaded` here is done or failed with nothing valid; in seven traces in ten the window's group
in another precision (`needs_kv_cache_zeroing`), each group's blocks recorded in its own block
size, with loads of some groups only. The connector profile's spec-decode padding in four in
ten. An encoder-decoder model's cross-attention group is not made with a connector: vLLM's
scheduler asserts it away (`Scheduler.__init__`: "Encoder-decoder models are not currently
supported with KV connectors").
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import connector
from kvfuzz.strategies.kvmanager.connector_ops import Loaded
from kvfuzz.strategies.kvmanager.hybrid import SIZES
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "connector sizes"
PAIRS = tuple((full, swa) for full, swa in SIZES if full != swa)


def build(rng: random.Random, num_ops: int) -> Trace:
    full, swa = rng.choice(PAIRS)
    scheduler = math.lcm(full, swa)
    hashed = rng.choice([d for d in (1, 2, 4) if math.gcd(full, swa) % d == 0])
    window = rng.randint(2, 3 * swa)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 48)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 8) * scheduler + rng.randint(0, 3)))
    observed = rng.random() < 0.3
    # the connector's requests, their counts cut around the scheduler block
    gen = connector._Connected(rng, scheduler, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    # several groups: a failed load is the request's whole (`failed_recving`), never a prefix
    ops = tuple(replace(op, valid=0) if isinstance(op, Loaded) and op.valid > 0 else op
                for op in gen.ops[:num_ops])
    trace = Trace(blocks, full, window, max_model_len, ops, rng.choice((None, 0)),
                  full_sequence_must_fit=rng.random() < 0.3,
                  watermark=0.0 if rng.random() < 0.8 else rng.choice((0.1, 0.2)),
                  events=observed, stats=observed, zeroing=rng.random() < 0.7,
                  window_block_size=swa, hash_block_size=hashed if hashed != full else 0,
                  note=f"profile {PROFILE}")
    trace = connector.some_groups(trace, random.Random(rng.random()))
    return connector.padded(trace, random.Random(rng.random()))


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[connector sizes]", build, num_ops=200, max_fuzz_ops=200)
