"""The detection benchmark's baseline for SWA traces: any op, any request so far, any length, valid
by construction, so that every input is compared; what the seeded generator's aim is measured
against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.swa import profile, scheduler_ops, trace as swa

# The request ops: the by-slot ones are a live guard's record of an engine's calls.
KINDS = tuple(name for name, kind in swa.KINDS.items() if kind not in swa.BY_SLOT)


def uniform_trace(rng: random.Random, preconditions=frozenset(),
                  num_ops: int = 200) -> swa.Trace:
    """Any op, any request so far, any length: no windows or chunks aimed at the pages. Within
    what `preconditions` declare: only checked decodes, no segment releases, none of the ops of
    the calls a class lacks."""
    lacked = {cls for name in profile.lacking(preconditions)
              for cls in profile.LACKING[name][2]}
    kinds = [kind for kind in KINDS if swa.KINDS[kind] not in lacked]
    hows = ("set",) if profile.NO_SEGMENT in preconditions else swa.HOWS
    checked = profile.checked_only(preconditions)
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(kinds)
        rid += kind == "admit"
        some = rng.randint(1, max(1, rid))
        ops.append(swa.Admit(rid) if kind == "admit" else
                   swa.Extend((some,), (rng.randint(1, 32),)) if kind == "extend" else
                   swa.ExtendTail(some, rng.randint(1, 32), rng.randint(0, 32))
                   if kind == "extend_tail" else
                   swa.Decode((), checked or rng.random() < 0.5) if kind == "decode" else
                   swa.Evict(some, rng.randint(0, 16), rng.choice(hows)) if kind == "evict"
                   else swa.Finish(some, rng.choice(hows)) if kind == "finish" else
                   _scheduler_op(rng, kind, some) if kind in _SCHEDULER else swa.KINDS[kind]())
    page_size = rng.randint(1, 8)
    return swa.Trace(page_size, rng.randint(1, 64) * page_size, rng.randint(1, 64) * page_size,
                     rng.random() < 0.5, tuple(ops), rng.random() < 0.5, rng.random() < 0.5)


_SCHEDULER = {swa.NAMES[kind] for kind in swa.SCHEDULER_OPS}


def _scheduler_op(rng: random.Random, kind: str, rid: int):
    if kind == "cache":
        return swa.Cache(rid)
    if kind == "offload":
        return swa.Offload(rid)
    if kind == "resize":
        return swa.Resize(rng.randint(1, 256), rng.randint(1, 256))
    if kind == "reclaim":
        return swa.Reclaim(rng.randint(-32, 32), rng.choice(scheduler_ops.RECLAIM_POOLS),
                           rng.random() < 0.5, rng.choice(scheduler_ops.TREES))
    return swa.Misuse(rng.choice(scheduler_ops.MISUSES), rng.randint(0, 99))
