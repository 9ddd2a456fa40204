"""The detection benchmark's baseline for Mamba traces: any op, any request so far, any count,
valid by construction, so that every input is compared; what the seeded generator's aim is
measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.mamba import trace as mamba
from kvfuzz.strategies.mamba.profile import unsupported


def uniform_trace(rng: random.Random, preconditions=frozenset(),
                  num_ops: int = 200) -> mamba.Trace:
    """Any op, any request so far, any count: no batches aimed at the pool's size. Group misuse
    the class declares unsupported is left out: an open group is ended before a nested begin or
    a clear, and an end without a begin is not made."""
    ops, rid, open_ = [], 0, False
    ruled_out = unsupported(preconditions)
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
            if open_ and mamba.NESTED in ruled_out:
                ops.append(mamba.GroupEnd())
            ops.append(mamba.GroupBegin(rng.randint(0, 8)))
            open_ = True
        elif kind == "group_end":
            if open_ or mamba.STRAY_END not in ruled_out:
                ops.append(mamba.GroupEnd())
            open_ = False
        else:
            if open_ and mamba.CLEAR_IN_GROUP in ruled_out:
                ops.append(mamba.GroupEnd())
            ops.append(mamba.Clear())
            open_ = False
    return mamba.Trace(rng.randint(2, 128), tuple(ops))
