"""The seeded plain-random compaction trace generator: `(seed, index)` names one trace forever.

Aimed where allocator bugs live: pools near full (allocations sized from `avail()`), frees at the
frontier, in the middle and of everything, move caps of 1 and 2, forwards left unfired, and (in a
quarter of the traces, a few times each) a `clear` of one pool or all of them, often with holes and
pending pages, as a cache flush may come while a forward's event has not fired yet.

Version 3 added free groups (SGLang's `free_group_begin` / `free_group_end` around a run of ops
whose frees it defers), in a quarter of the traces: a few groups each, some with a `clear` inside
(which forgets the group), a nested begin (refused) or an end with no group open. It draws as
version 2 did and decides on groups after: trace `index` of "compaction/3" is "compaction/2"'s
whenever it has no group (3 in 4). Version 2 added `clear`; version 1 ("compaction/1") had none
(and drew differently throughout: trace `index` of those two versions are unrelated).

Version 4 added HiCache load-back reservations (SGLang's `alloc_physical`, rolled back by
`cancel_physical_reservation`), in a quarter of the traces: a few each, most given back some ops
later, some held until a `clear` (one is made just before half of the trace's clears) or the
end. It draws as version 3 did and decides on them after: trace `index` of "compaction/4" is
"compaction/3"'s whenever it has no reservation (3 in 4).

Version 5 added page sizes above 1 (SGLang's `page_size`: the class's allocations, frees and
reservations in tokens, its tables in pages), in half of the traces: 2 or 4 tokens a page. It
draws as version 4 did and decides on the page size after: trace `index` of "compaction/5" is
"compaction/4"'s whenever its pages are of one token.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.compaction.trace import (Alloc, Clear, Drain, Fire, Flush, Forward, Free,
                                                GroupBegin, GroupEnd, Op, Params, Pick, Release,
                                                Reserve, Trace)
from kvfuzz.strategies.inputs import Origin
from kvfuzz.strategies.sources import TraceGenerator, seeded_random

_EPPS = ((8, 8), (8, 8), (4, 4), (4, 6), (8, 12), (6, 4))
_OPS = (("alloc", 30), ("free", 24), ("flush", 16), ("forward", 10), ("fire", 10), ("drain", 10))


_CLEAR_WEIGHT = 1  # of 100: about 3 clears in a trace of 300 ops that has them


_GROUP_SHARE = 0.25  # of traces: groups change a trace, and 3 in 4 stay version 2's


_LOAD_BACK_SHARE = 0.25  # of traces: 3 in 4 stay version 3's


_PAGED_SHARE = 0.5  # of traces: the rest stay version 4's
_PAGE_SIZES = (2, 2, 4)


def build_v5(rng: random.Random, num_ops: int) -> Trace:
    """Version 4's trace, then (drawn after all of its draws) its page size."""
    trace = build(rng, num_ops)
    if rng.random() >= _PAGED_SHARE:
        return trace
    return replace(trace, params=replace(trace.params, page_size=rng.choice(_PAGE_SIZES)))


def build(rng: random.Random, num_ops: int) -> Trace:
    """Version 3's trace, then (drawn after all of its draws) the load-back reservations, if
    any."""
    trace = build_v3(rng, num_ops)
    if rng.random() >= _LOAD_BACK_SHARE:
        return trace
    ops = _with_load_backs(rng, list(trace.ops), trace.params)
    return replace(trace, ops=tuple(ops[:num_ops]))


def build_v3(rng: random.Random, num_ops: int) -> Trace:
    """Version 2's trace, then (drawn after all of its draws) the free groups, if any."""
    trace = _build_v2(rng, num_ops)
    if rng.random() >= _GROUP_SHARE:
        return trace
    return replace(trace, ops=tuple(_with_groups(rng, list(trace.ops))[:num_ops]))


def _with_load_backs(rng: random.Random, ops: list[Op], params: Params) -> list[Op]:
    """Two to six reservations at random places, each rolled back 1 to 12 ops later (4 in 5)
    or held on; and one just before half of the clears (a cache flush with a load-back in
    progress), so a clear finds reservations to drop."""
    clears = [i for i, op in enumerate(ops) if isinstance(op, Clear)]
    starts = [rng.randrange(len(ops) + 1) for _ in range(rng.randint(2, 6))]
    before_clears = [i for i in clears if rng.random() < 0.5]
    for start in sorted(starts + before_clears, reverse=True):
        pool = ops[start].pool if start in before_clears and ops[start].pool else \
            rng.choice(params.pools())
        reserve = (Reserve(pool, rng.choice((0, -1, -2)), relative=True) if rng.random() < 0.2
                   else Reserve(pool, rng.choice((1, 1, 2, 2, 3, 4))))
        tail: list[Op] = []
        if start not in before_clears and rng.random() < 0.8:
            tail = [Release(pool, "oldest" if rng.random() < 0.7 else "newest")]
        span = rng.randint(1, 12)
        ops[start:start + span] = [reserve, *ops[start:start + span], *tail]
    return ops


def _with_groups(rng: random.Random, ops: list[Op]) -> list[Op]:
    """Two to eight free groups, each opened just before a free and closed after 1 to 10 ops of
    the trace (its frees of that pool deferred to the end), now and then with a clear inside it
    (the group is then forgotten, and the end finds none open), a nested begin (refused), or a
    second end (no group open). Groups may overlap: what the release does then is the model's."""
    frees = [i for i, op in enumerate(ops) if isinstance(op, Free)]
    for start in sorted(rng.sample(frees, min(len(frees), rng.randint(2, 8))), reverse=True):
        pool, span = ops[start].pool, rng.randint(1, 10)
        inner = ops[start:start + span]
        twist = rng.random()
        if twist < 0.3:  # a cache flush inside the step: every pool, or this one
            inner.insert(rng.randint(0, len(inner)), Clear(None if rng.random() < 0.7 else pool))
        elif twist < 0.4:
            inner.insert(rng.randint(0, len(inner)), GroupBegin(pool))
        elif twist < 0.5:
            inner.append(GroupEnd(pool))
        ops[start:start + span] = [GroupBegin(pool), *inner, GroupEnd(pool)]
    return ops


def _build_v2(rng: random.Random, num_ops: int) -> Trace:
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


class _DrawsAsV2(TraceGenerator):
    """Trace `index` seeded as version 2's was, so that a trace with no group (and, in version
    4, no reservation; in version 5, pages of one token) is version 2's."""

    def generate(self, seed: int, index: int, num_ops: int | None = None):
        rng = seeded_random("compaction/2", seed, index)
        return replace(self.build(rng, num_ops or self.num_ops),
                       origin=Origin(self.name, seed, index))


GENERATOR = _DrawsAsV2("compaction/5", build_v5, num_ops=300, max_fuzz_ops=300)
VERSION_4 = _DrawsAsV2("compaction/4", build, num_ops=300, max_fuzz_ops=300)
VERSION_3 = _DrawsAsV2("compaction/3", build_v3, num_ops=300, max_fuzz_ops=300)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes
