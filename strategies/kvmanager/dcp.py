"""The "dcp" profile (`kvmanager/5[dcp]`, a stream of its own): decode context parallelism. One
full-attention group whose blocks are sharded over 2 or 4 ranks (`Trace.dcp`): the spec's
blocks hold 1 to 4 tokens each, the manager's (`dcp_world_size`) that many times more, and the
manager schedules, hashes and allocates in its own blocks. kvfuzz's `kvmanager` traces built
none before (vLLM's `FullAttentionManager.find_longest_cache_hit` scales the spec's block to
the manager's only then: `kvfuzz mutate`'s `dcp_world_size > 1` as `< 1` survived). The
requests and the engine's settings are the hybrid profiles' (`hybrid._ops`, `hybrid._engine`).
Standard library only."""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager import hybrid
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator


def build_dcp(rng: random.Random, num_ops: int) -> Trace:
    """Blocks of 2 to 16 tokens, each rank's share 1 to 4; hashed per the manager's block (the
    unitary coordinator asserts it)."""
    ranks = rng.choice((2, 2, 4))
    size = ranks * rng.choice((1, 2, 2, 4))
    blocks = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    retention = rng.choice((None, None, 0))
    return Trace(blocks, size, 0, max_model_len, hybrid._ops(rng, size, max_model_len, num_ops),
                 retention, **hybrid._engine(rng, size), dcp=ranks, note="profile dcp")


PROFILES = ("dcp",)
GENERATOR = TraceGenerator("kvmanager/5[dcp]", build_dcp, num_ops=200, max_fuzz_ops=200)
