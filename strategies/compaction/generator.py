"""The seeded plain-random compaction trace generator: `(seed, index)` names one trace forever.

Aimed where allocator bugs live: pools near full (allocations sized from `avail()`), frees at the
frontier, in the middle and of everything, move caps of 1 and 2, forwards left unfired, and (in a
quarter of the traces, a few times each) a `clear` of one pool or all of them, often with holes and
pending pages, as a cache flush may come while a forward's event has not fired yet.

Version 2 added `clear`; version 1 ("compaction/1") had none (and drew differently throughout:
trace `index` of the two versions are unrelated).
"""

from __future__ import annotations

import random

from kvfuzz.strategies.compaction.trace import (Alloc, Clear, Drain, Fire, Flush, Forward, Free,
                                                Op, Params, Pick, Trace)
from kvfuzz.strategies.sources import TraceGenerator

_EPPS = ((8, 8), (8, 8), (4, 4), (4, 6), (8, 12), (6, 4))
_OPS = (("alloc", 30), ("free", 24), ("flush", 16), ("forward", 10), ("fire", 10), ("drain", 10))


_CLEAR_WEIGHT = 1  # of 100: about 3 clears in a trace of 300 ops that has them


def build(rng: random.Random, num_ops: int) -> Trace:
    params = _params(rng)
    # Most traces never clear: a clear empties both pools, and deep states find the other faults.
    clears = rng.random() < 0.25
    kinds, weights = zip(*_OPS, ("clear", _CLEAR_WEIGHT if clears else 0))
    ops: list[Op] = []
    while len(ops) < num_ops:
        kind = rng.choices(kinds, weights)[0]
        op = _op(rng, kind, params)
        if kind == "clear" and rng.random() < 0.5:
            ops += _pending_pages(op.pool or rng.choice(params.pools()))
        ops.append(op)
    return Trace(params, tuple(ops[:num_ops]))


def _pending_pages(pool: str) -> list[Op]:
    """Ops that leave pages pending where the pool has room for four more: a forward that
    writes nothing stays unfired, the bottom pages are freed, and a flush moves pages down into
    them; the moved pages wait on the forward's event (what a clear must then drop)."""
    return [Alloc(pool, 4), Forward(), Free(pool, Pick("bottom", 2)), Flush(pool, urgent=False)]


def _params(rng: random.Random) -> Params:
    epp_up, epp_down = rng.choice(_EPPS)
    widest = max(epp_up, epp_down)
    # An odd remainder of bytes exercises the floor in num_pages and in the gap.
    total_bytes = widest * rng.randint(10, 40) + rng.randrange(widest)
    return Params(total_bytes=total_bytes, epp_up=epp_up, epp_down=epp_down,
                  sink_bytes=widest * rng.choice((1, 1, 2)) + rng.choice((0, 0, 1)),
                  two_ended=rng.random() < 0.75, move_cap=rng.choice((1, 2, 2, 3, 4096)))


def _op(rng: random.Random, kind: str, params: Params) -> Op:
    pool = rng.choice(params.pools())
    if kind == "alloc":
        if rng.random() < 0.3:  # fill to the brim, or overshoot by one to run the ladder
            return Alloc(pool, rng.choice((0, 0, -1, -2, 1)), relative=True)
        return Alloc(pool, rng.choice((1, 1, 1, 2, 2, 3, 4, 6)))
    if kind == "free":
        return Free(pool, _pick(rng, ("top", "top", "middle", "random", "random", "bottom", "all")))
    if kind == "flush":
        return Flush(pool, urgent=rng.random() < 0.3)
    if kind == "drain":
        return Drain(pool, urgent=rng.random() < 0.2)
    if kind == "clear":  # all pools, as a cache flush does, or one, as one pool's clear() does
        return Clear(None if rng.random() < 0.7 else pool)
    if kind == "forward":
        down = _maybe_pick(rng) if params.two_ended else None
        return Forward(up=_maybe_pick(rng), down=down)
    return Fire(rng.choice(("oldest", "oldest", "newest", "all")))


def _maybe_pick(rng: random.Random) -> Pick | None:
    return None if rng.random() < 0.3 else _pick(rng, ("top", "top", "random", "middle"), 3)


def _pick(rng: random.Random, wheres: tuple[str, ...], most: int = 4) -> Pick:
    where = rng.choice(wheres)
    return Pick(where, rng.randint(1, most), rng.randrange(1000) if where == "random" else 0)


GENERATOR = TraceGenerator("compaction/2", build, num_ops=300, max_fuzz_ops=300)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes
