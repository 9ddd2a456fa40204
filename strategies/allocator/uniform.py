"""The detection benchmark's baseline for allocator traces: any op on any request so far, of the
seeded traces' length, with none of their aim, valid by construction, so that every input is
compared; what the seeded generator's aim is measured against (`kvfuzz bench detection`,
strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.allocator.trace import (FREE_HOWS, MISUSES, Admit, AllocPages, Clear,
                                               Decode, Extend, Finish, GroupBegin, GroupEnd,
                                               Misuse, Trace, Truncate)


def uniform_trace(rng: random.Random, num_ops: int = 200) -> Trace:
    page_size = rng.randint(1, 16)
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(OPS)
        rid += kind in ("admit", "alloc")
        ops.append(_op(kind, rng, rid, page_size))
    return Trace(page_size, page_size * rng.randint(2, 64), rng.random() < 0.5, tuple(ops),
                 rng.random() < 0.5)


OPS = ("admit", "extend", "decode", "finish", "truncate", "alloc", "group", "clear",
       "misuse")


def _op(kind: str, rng: random.Random, rid: int, page_size: int):
    live = rng.randint(1, max(1, rid))  # any request so far, finished or not
    if kind == "admit":
        return Admit(rid)
    if kind in ("extend", "decode"):
        rids = tuple({rng.randint(1, max(1, rid)) for _ in range(rng.randint(1, 4))})
        return Extend(rids, tuple(rng.randint(0, 2 * page_size) for _ in rids)) \
            if kind == "extend" else Decode(rids)
    if kind == "finish":
        return Finish(live, rng.choice(FREE_HOWS))
    if kind == "truncate":
        return Truncate(live, rng.randint(0, 4 * page_size), rng.choice(FREE_HOWS))
    if kind == "alloc":
        return AllocPages(rid, rng.randint(0, 4))
    if kind == "group":
        return rng.choice((GroupBegin(), GroupEnd()))
    if kind == "clear":
        return Clear()
    return Misuse(rng.choice(MISUSES), rng.randint(0, 99))
