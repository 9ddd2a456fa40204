"""The detection benchmark's baseline for SWA traces: any op, any request so far, any length, valid
by construction, so that every input is compared; what the seeded generator's aim is measured
against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.swa import trace as swa

# The request ops: the by-slot ones are a live guard's record of an engine's calls.
KINDS = tuple(name for name, kind in swa.KINDS.items() if kind not in swa.BY_SLOT)


def uniform_trace(rng: random.Random, preconditions=frozenset(),
                  num_ops: int = 200) -> swa.Trace:
    """Any op, any request so far, any length: no windows or chunks aimed at the pages."""
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(KINDS)
        rid += kind == "admit"
        some = rng.randint(1, max(1, rid))
        ops.append(swa.Admit(rid) if kind == "admit" else
                   swa.Extend((some,), (rng.randint(1, 32),)) if kind == "extend" else
                   swa.ExtendTail(some, rng.randint(1, 32), rng.randint(0, 32))
                   if kind == "extend_tail" else
                   swa.Decode((), rng.random() < 0.5) if kind == "decode" else
                   swa.Evict(some, rng.randint(0, 16), rng.choice(swa.HOWS)) if kind == "evict"
                   else swa.Finish(some, rng.choice(swa.HOWS)) if kind == "finish" else
                   swa.KINDS[kind]())
    page_size = rng.randint(1, 8)
    return swa.Trace(page_size, rng.randint(1, 64) * page_size, rng.randint(1, 64) * page_size,
                     rng.random() < 0.5, tuple(ops))
