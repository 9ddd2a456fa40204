"""The detection benchmark's baseline for offload traces: any op, any request so far, any chunk
range, any completion, valid by construction, so that every input is compared; what the seeded
generator's aim is measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.offload import trace as offload
from kvfuzz.strategies.offload.profile import drains_events, policies


def uniform_trace(rng: random.Random, preconditions=frozenset(),
                  num_ops: int = 200) -> offload.Trace:
    """Any op, any request so far, hashes from a small range: no prompt families, no request
    lifecycle, no pool filled on purpose. Within what `preconditions` declare: a policy the
    class runs, and events taken before each reset where its callers drain them."""
    ops, rid = [], 0
    drain = drains_events(preconditions)
    for _ in range(num_ops):
        kind = rng.choice(tuple(offload.KINDS))
        rid += kind == "new"
        some = rng.randint(1, max(1, rid))
        start = rng.randint(0, 8)
        if kind == "new":
            ops.append(offload.New(rid, tuple(rng.sample(range(1, 33), rng.randint(1, 8))),
                                   rng.random() < 0.5))
        elif kind in ("lookup", "load", "store", "touch"):
            ops.append(offload.KINDS[kind](some, start, start + rng.randint(0, 8)))
        elif kind == "complete_store":
            ops.append(offload.CompleteStore(some, rng.random() < 0.5))
        elif kind in ("complete_load", "finish"):
            ops.append(offload.KINDS[kind](some))
        else:
            if kind == "reset" and drain:
                ops.append(offload.Events())
            ops.append(offload.KINDS[kind]())
    return offload.Trace(rng.choice(policies(preconditions)), rng.randint(1, 32), rng.randint(1, 2),
                         rng.random() < 0.5, rng.choice((1, 1, 2)), rng.randint(1, 64),
                         tuple(ops))
