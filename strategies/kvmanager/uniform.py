"""The detection benchmark's baseline for KV-cache manager traces: any op on any request so far,
random prompts, valid by construction, so that every input is compared; what the seeded
generator's aim is measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager import trace as kvmanager


def uniform_trace(rng: random.Random, preconditions=frozenset(),
                  num_ops: int = 200) -> kvmanager.Trace:
    """Any op on any request so far, prompts of random tokens from a wide vocabulary (so
    prefixes are rarely shared), any chunk: no prompt families, no boundary-aimed cuts. The
    engine settings are drawn uniformly from what the format allows (they are configuration,
    not edge classes)."""
    block_size = rng.randint(1, 8)
    window = rng.choice((0, rng.randint(2, 32)))
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(("arrive", "schedule", "decode", "preempt", "finish", "evict", "reset"))
        someone = rng.randint(1, max(1, rid))
        if kind == "arrive":
            rid += 1
            ops.append(kvmanager.Arrive(rid, tuple(rng.randint(0, 1000)
                                                   for _ in range(rng.randint(1, 32)))))
        elif kind == "schedule":
            ops.append(kvmanager.Schedule(someone, rng.randint(1, 64)))
        elif kind == "decode":
            ops.append(kvmanager.Decode(someone, rng.randint(0, 1000)))
        elif kind == "preempt":
            ops.append(kvmanager.Preempt(someone))
        elif kind == "finish":
            ops.append(kvmanager.Finish(someone))
        elif kind == "evict":
            ops.append(kvmanager.Evict(tuple(rng.randint(0, 64) for _ in range(3))))
        else:
            ops.append(kvmanager.Reset())
    retention = rng.choice((None, 0) + ((rng.randint(1, 8) * block_size,) if window else ()))
    return kvmanager.Trace(rng.randint(2, 64), block_size, window, rng.choice((1024, 64)),
                           tuple(ops), retention, rng.random() < 0.5,
                           rng.choice((None, rng.randint(1, 64))))
