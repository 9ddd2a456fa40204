"""The detection benchmark's baseline for block-pool traces: any op, any holder so far, any count,
valid by construction, so that every input is compared; what the seeded generator's aim is
measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.blockpool import trace as blockpool


def uniform_trace(rng: random.Random, preconditions=frozenset(),
                  num_ops: int = 200) -> blockpool.Trace:
    """Any op, any request so far, any count, hashes from a small range: no prompt families,
    no pool filled to the brim."""
    blocks, ops, rid = rng.randint(2, 64), [], 0

    def hashes() -> tuple[int, ...]:
        return tuple(rng.randint(1, 32) for _ in range(rng.randint(0, 8)))

    def rids() -> tuple[int, ...]:
        return tuple({rng.randint(1, max(1, rid)) for _ in range(rng.randint(1, 3))})

    for _ in range(num_ops):
        kind = rng.choice(("alloc", "lookup", "share", "pad", "cache", "free", "unpin", "evict",
                           "probe", "reset"))
        rid += kind in ("alloc", "lookup", "share", "pad")
        if kind == "alloc":
            ops.append(blockpool.Alloc(rid, rng.randint(0, 8)))
        elif kind == "lookup":
            ops.append(blockpool.Lookup(rid, hashes(), rng.randint(0, 1)))
        elif kind == "share":
            ops.append(blockpool.Share(rid, rng.randint(1, rid), rng.randint(1, 8)))
        elif kind == "pad":
            ops.append(blockpool.Pad(rid, rng.randint(1, 3)))
        elif kind == "cache":
            ops.append(blockpool.Cache(rng.randint(1, max(1, rid)), hashes(), rng.randint(0, 1)))
        elif kind in ("free", "unpin"):
            ops.append(blockpool.Free(rids(), rng.random() < 0.5) if kind == "free"
                       else blockpool.Unpin(rids()))
        elif kind == "evict":
            ops.append(blockpool.Evict(tuple(rng.randint(0, blocks) for _ in range(3))))
        elif kind == "probe":
            ops.append(blockpool.Probe(hashes(), (rng.randint(0, 1),)))
        else:
            ops.append(blockpool.Reset())
    return blockpool.Trace(blocks, rng.random() < 0.5, tuple(ops))
