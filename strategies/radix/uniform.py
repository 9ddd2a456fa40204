"""The detection benchmark's baseline for radix traces: any op, any request so far, tokens from a
wide vocabulary at any length, valid by construction, so that every input is compared; what the
seeded generator's aim is measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.radix import trace as radix


def uniform_trace(rng: random.Random, num_ops: int = 120) -> radix.Trace:
    """Any op, any request so far: no prompt families, no key lengths aimed at page edges."""
    page = rng.choice((1, 2, 4, 8, 16))
    ops, rid = [], 0

    def tokens() -> tuple[int, ...]:
        return tuple(rng.randint(1, 50) for _ in range(rng.randint(1, 24)))

    for _ in range(num_ops):
        kind = rng.choice(tuple(radix.KINDS))
        rid += kind == "admit"
        some = rng.randint(1, max(1, rid))
        if kind == "admit":
            sequence = tokens()
            ops.append(radix.Admit(rid, sequence, rng.randint(1, len(sequence))))
        elif kind == "extend":
            ops.append(radix.Extend(some, rng.randint(0, 16)))
        elif kind in ("checkpoint", "finish"):
            ops.append(radix.KINDS[kind](some))
        elif kind in ("match", "touch", "pin", "insert"):
            ops.append(radix.KINDS[kind](tokens()))
        elif kind == "evict":
            ops.append(radix.Evict(rng.randint(0, 32)))
        else:
            ops.append(radix.Reset())
    return radix.Trace(page, page * rng.randint(2, 64), rng.choice(radix.POLICIES),
                       rng.random() < 0.5, tuple(ops))
