"""The detection benchmark's baseline for allocator traces: any op on any request so far, of the
seeded traces' length, with none of their aim, valid by construction, so that every input is
compared; what the seeded generator's aim is measured against (`kvfuzz bench detection`,
strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.allocator.profile import PAGE_SIZE_2_UP, profile_for
from kvfuzz.strategies.allocator.trace import (MISUSES, Admit, AllocPages, Clear, Decode, Extend,
                                               Finish, GroupBegin, GroupEnd, Misuse, Trace,
                                               Truncate)


def uniform_trace(rng: random.Random, preconditions=frozenset(), num_ops: int = 200) -> Trace:
    """Within what `preconditions` declare (the class's interface, page sizes, the misuse it
    checks, the calls it releases by): any other trace would be outside its contract, unrun."""
    profile = profile_for(preconditions)
    if profile.interface == "token":
        page_size = 1
    else:
        page_size = rng.randint(2 if PAGE_SIZE_2_UP in preconditions else 1, 16)
    misuses = tuple(kind for kind in MISUSES if kind in profile.misuses)  # the single-op ones
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(OPS if misuses else OPS[:-1])
        rid += kind in ("admit", "alloc")
        ops.append(_op(kind, rng, rid, page_size, profile.hows, misuses))
    return Trace(page_size, page_size * rng.randint(2, 64), rng.random() < 0.5, tuple(ops),
                 rng.random() < 0.5, profile.interface)


OPS = ("admit", "extend", "decode", "finish", "truncate", "alloc", "group", "clear",
       "misuse")


def _op(kind: str, rng: random.Random, rid: int, page_size: int, hows, misuses):
    live = rng.randint(1, max(1, rid))  # any request so far, finished or not
    if kind == "admit":
        return Admit(rid)
    if kind in ("extend", "decode"):
        rids = tuple({rng.randint(1, max(1, rid)) for _ in range(rng.randint(1, 4))})
        return Extend(rids, tuple(rng.randint(0, 2 * page_size) for _ in rids)) \
            if kind == "extend" else Decode(rids)
    if kind == "finish":
        return Finish(live, rng.choice(hows))
    if kind == "truncate":
        return Truncate(live, rng.randint(0, 4 * page_size), rng.choice(hows))
    if kind == "alloc":
        return AllocPages(rid, rng.randint(0, 4))
    if kind == "group":
        return rng.choice((GroupBegin(), GroupEnd()))
    if kind == "clear":
        return Clear()
    return Misuse(rng.choice(misuses), rng.randint(0, 99))
