"""The detection benchmark's baseline for Mamba traces: any op, any request so far, any count,
valid by construction, so that every input is compared; what the seeded generator's aim is
measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.mamba import trace as mamba


def uniform_trace(rng: random.Random, preconditions=frozenset(),
                  num_ops: int = 200) -> mamba.Trace:
    """Any op, any request so far, any count: no batches aimed at the pool's size."""
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(("admit", "alloc", "finish", "group_begin", "group_end", "clear"))
        rid += kind in ("admit", "alloc")
        if kind == "admit":
            ops.append(mamba.Admit(rid))
        elif kind == "alloc":
            ops.append(mamba.AllocMany(rid, rng.randint(0, 8)))
        elif kind == "finish":
            ops.append(mamba.Finish(tuple({rng.randint(1, max(1, rid)) for _ in range(3)})))
        elif kind == "group_begin":
            ops.append(mamba.GroupBegin(rng.randint(0, 8)))
        else:
            ops.append(mamba.GroupEnd() if kind == "group_end" else mamba.Clear())
    return mamba.Trace(rng.randint(2, 128), tuple(ops))
