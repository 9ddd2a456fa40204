"""The detection benchmark's baseline for compaction traces: any op on any pool, of the seeded
geometry, valid by construction, so that every input is compared; what the seeded generator's
aim is measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.compaction import generator
from kvfuzz.strategies.compaction.trace import (WHERE, WHICH, Alloc, Drain, Fire, Flush, Forward,
                                                Free, Pick, Trace)


def uniform_trace(rng: random.Random, preconditions=frozenset(), num_ops: int = 300) -> Trace:
    params = generator._params(rng)  # the same geometry as the seeded traces

    def pick() -> Pick:
        return Pick(rng.choice(WHERE), rng.randint(1, 4), rng.randrange(1000))
    ops = []
    for _ in range(num_ops):
        pool = rng.choice(params.pools())
        kind = rng.choice((Alloc, Free, Flush, Drain, Forward, Fire))
        ops.append(Alloc(pool, rng.randint(1, 6)) if kind is Alloc else
                   Free(pool, pick()) if kind is Free else
                   kind(pool, rng.random() < 0.5) if kind in (Flush, Drain) else
                   Forward(pick(), pick() if params.two_ended else None) if kind is Forward else
                   Fire(rng.choice(WHICH)))
    return Trace(params, tuple(ops))
