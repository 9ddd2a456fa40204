"""The detection benchmark's baseline for radix traces: any op, any request so far, tokens from a
wide vocabulary at any length, valid by construction, so that every input is compared; what the
seeded generator's aim is measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.radix import trace as radix
from kvfuzz.strategies.radix.profile import NO_RESET_IN_FLIGHT, WINDOW


def uniform_trace(rng: random.Random, preconditions=frozenset(),
                  num_ops: int = 120) -> radix.Trace:
    """Any op, any request so far: no prompt families, no key lengths aimed at page edges.
    Within what `preconditions` declare: a class that declares no reset in flight gets its
    live requests finished before each reset (else the trace is outside its contract, unrun);
    one that declares the pure-SWA window gets a window trace (page size 1)."""
    page = rng.choice((1, 2, 4, 8, 16))
    ops, rid, live = [], 0, []
    idle_resets = NO_RESET_IN_FLIGHT in preconditions

    def tokens() -> tuple[int, ...]:
        return tuple(rng.randint(1, 50) for _ in range(rng.randint(1, 24)))

    for _ in range(num_ops):
        kind = rng.choice(tuple(radix.KINDS))
        rid += kind == "admit"
        some = rng.randint(1, max(1, rid))
        if kind == "admit":
            sequence = tokens()
            ops.append(radix.Admit(rid, sequence, rng.randint(1, len(sequence))))
            live.append(rid)
        elif kind == "extend":
            ops.append(radix.Extend(some, rng.randint(0, 16)))
        elif kind in ("checkpoint", "finish"):
            ops.append(radix.KINDS[kind](some))
            if kind == "finish" and some in live:
                live.remove(some)
        elif kind in ("match", "touch", "pin", "insert"):
            ops.append(radix.KINDS[kind](tokens()))
        elif kind == "evict":
            ops.append(radix.Evict(rng.randint(0, 32)))
        else:
            if idle_resets:
                ops.extend(radix.Finish(live_rid) for live_rid in live)
            live.clear()
            ops.append(radix.Reset())
    if WINDOW in preconditions:  # a pure-SWA cache: page size 1, a window, the floor set
        return radix.Trace(1, rng.randint(2, 64), rng.choice(radix.POLICIES),
                           rng.random() < 0.5, tuple(ops), swa_window=rng.randint(1, 8),
                           prefill_aware=True)
    return radix.Trace(page, page * rng.randint(2, 64), rng.choice(radix.POLICIES),
                       rng.random() < 0.5, tuple(ops))
