"""The "capped mamba" profile (`kvmanager/5[capped mamba]`, a stream of its own, made alone only:
`streams.ALONE_ONLY`): the caller's cap on the lookups beside a Mamba "align" group, as vLLM
0.33.0's scheduler passes it with auxiliary outputs on (`capped_hits.py`,
`capped_connector.py`): `get_computed_blocks` (the hybrid coordinator's fixed point, EAGLE's
margin a drop unit past the cap) and, with a KV connector, `get_computed_blocks_for_connector`
(`find_longest_cache_hit_per_group`: each group capped on its own, full attention's EAGLE margin
at `min(cap + margin, hashed tokens)`, lines 968-971, whose `+` only a cap below the hashed
tokens reaches).

The trace is another profile's, drawn first and kept as it is: half "mamba connector" (a KV
connector beside the group, EAGLE's drop in a quarter), half "mamba align" (the reduced mode's
own: checkpoints, drafts, asynchronous scheduling, EAGLE, MTP). Then 70% of the admission ops
(`connect`, `schedule`) get a cap (`capped_connector.capped`): a multiple of the block from 0
to a block past the request's prompt. Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import hybrid, mamba_connector
from kvfuzz.strategies.kvmanager.capped_connector import capped
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "capped mamba"


def build(rng: random.Random, num_ops: int) -> Trace:
    base = mamba_connector.build(rng, num_ops) if rng.random() < 0.5 else \
        hybrid.build_mamba_align_profile(rng, num_ops)
    return replace(base, ops=capped(rng, base.ops, base.block_size), note=f"profile {PROFILE}")


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[capped mamba]", build, num_ops=200, max_fuzz_ops=200)
