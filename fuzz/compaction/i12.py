"""Invariant I12 of the lazy-compaction allocator: the same alloc/free trace run eager and lazy
(lazy ending with an urgent flush) ends with the same live set and the same data per virtual
page. Both sides are implementations under test (factories), called through `CheckedSide`: what
either raises comes out as `ImplementationRaised`.
"""

from __future__ import annotations

import itertools

from kvfuzz.fuzz.compaction.sides import CheckedSide, depth_order, stamp
from kvfuzz.oracle.compaction.model import geometries
from kvfuzz.oracle.compaction.tokens import pages_named, tokens_of
from kvfuzz.strategies.compaction.trace import Alloc, Clear, Drain, Flush, Free, Op, Trace


def check_i12(trace: Trace, lazy, eager, device: str = "cpu") -> list[tuple[str, str]]:
    """I12: the alloc/free/clear projection of `trace` run eager and lazy, lazy ending with an
    urgent flush, gives the same vids, live set, data per vid and span == live; the problems,
    labelled "I12" (none: it holds). Forwards and fires are dropped (they make pending pages that
    lazy may not count), and so are free groups (every free is at once) and load-back reservations
    (the eager side takes none); frees are sorted, so both modes recycle vids in the same order;
    picks resolve against the lazy side's layout. Above page size 1 allocations and frees are
    in tokens, as the judge's."""
    sides = {"lazy": CheckedSide(lazy, trace.params, device),
             "eager": CheckedSide(eager, trace.params, device)}
    geos = geometries(trace.params)
    stamps = {name: {} for name in geos}
    serials = itertools.count(1)
    for index, op in enumerate(trace.ops):
        problems = _i12_step(sides, geos, stamps, op, serials, trace.params.page_size)
        if problems:
            return [("I12", f"at op {index}: {problem}") for problem in problems]
    for name in geos:
        sides["lazy"].flush(name, urgent=True)
    problems = []
    for name, geo in geos.items():
        for mode, side in sides.items():
            snap, data = side.snapshot(name), side.read_live(name)
            span = snap.wm - geo.reserved if geo.up else geo.num_pages - 1 - snap.wm
            if span != snap.live or set(data) != set(stamps[name]):
                problems.append(f"I12 {mode} {name}: span {span}, live {snap.live}, live vids "
                                f"{sorted(data)[:8]}, expected {sorted(stamps[name])[:8]}")
            wrong = sorted(vid for vid, row in data.items() if stamps[name].get(vid) != row)
            if wrong:
                problems.append(f"I12 {mode} {name}: data differs from the stamps for vids "
                                f"{wrong[:8]}")
    return [("I12", problem) for problem in problems]


def _i12_step(sides, geos, stamps, op: Op, serials, page_size: int) -> list[str]:
    lazy, eager = sides["lazy"], sides["eager"]
    if isinstance(op, Alloc):
        n = max(1, lazy.avail(op.pool) + op.n) if op.relative else op.n
        results = [lazy.alloc(op.pool, n * page_size), eager.alloc(op.pool, n * page_size)]
        if results[0] != results[1]:
            return [f"I12 alloc {op.pool} {n}: lazy gave {results[0]}, eager gave {results[1]}"]
        vids = pages_named(results[0] or [], page_size)
        for vid in vids:
            stamps[op.pool][vid] = stamp(next(serials), geos[op.pool].epp)
        if vids:
            payloads = [stamps[op.pool][vid] for vid in vids]
            lazy.write(op.pool, vids, payloads)
            eager.write(op.pool, vids, payloads)
    elif isinstance(op, Free):
        vids = sorted(op.pick.resolve(depth_order(lazy.snapshot(op.pool), geos[op.pool].up)))
        if vids:
            lazy.free(op.pool, tokens_of(vids, page_size))
            eager.free(op.pool, tokens_of(vids, page_size))
            for vid in vids:
                del stamps[op.pool][vid]
    elif isinstance(op, Flush):
        lazy.flush(op.pool, op.urgent)
    elif isinstance(op, Drain):
        lazy.drain(op.pool, op.urgent)
    elif isinstance(op, Clear):  # both modes start over: the same vids come out next
        for name in [op.pool] if op.pool else list(geos):
            lazy.clear(name)
            eager.clear(name)
            stamps[name].clear()
    return []

