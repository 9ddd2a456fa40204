"""Shrinks a failing allocator trace: cut after the failing op, drop whole requests, then drop runs
of ops (halves down to single ops), keeping each cut only while the trace still fails the same way
(same implementation, op kind, field or invariant, and known-difference class)."""

from __future__ import annotations

import time
from dataclasses import fields, replace

from kvfuzz.fuzz.allocator_diff import AllocatorDivergence, run_trace
from kvfuzz.strategies.allocator.trace import Extend, Trace


def shrink(divergence: AllocatorDivergence, device: str = "cpu", budget_s: float = 20.0,
           outside: bool | None = None) -> AllocatorDivergence:
    """The smallest failing trace found within `budget_s`; its divergence (origin dropped)."""
    deadline = time.monotonic() + budget_s
    key, best = divergence.key(), divergence
    origin = divergence.trace.origin
    source = divergence.shrunk_from or (
        f"{origin.describe() if origin else 'a trace'}, {len(divergence.trace.ops)} ops")

    def attempt(ops) -> bool:
        nonlocal best
        if time.monotonic() > deadline:
            return False
        found = run_trace(replace(best.trace, ops=tuple(ops), origin=None), best.impl, device,
                          outside)
        if found is None or found.key() != key:
            return False
        best = _cut(found)
        return True

    attempt(best.trace.ops[:best.op_index + 1])
    for rid in sorted(_rids(best.trace), reverse=True):
        attempt([op for op in map(lambda op: _without(op, rid), best.trace.ops) if op is not None])
    chunk = max(1, len(best.trace.ops) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        start, changed = 0, False
        while start < len(best.trace.ops):
            ops = best.trace.ops
            if attempt(ops[:start] + ops[start + chunk:]):
                changed = True
            else:
                start += chunk
        if not changed:
            chunk //= 2
    best.shrunk_from = source if best is not divergence else divergence.shrunk_from
    return best


def _cut(divergence: AllocatorDivergence) -> AllocatorDivergence:
    trace = divergence.trace
    if divergence.op_index + 1 < len(trace.ops):
        divergence.trace = replace(trace, ops=trace.ops[:divergence.op_index + 1])
    return divergence


def _rids(trace: Trace) -> set[int]:
    found = set()
    for op in trace.ops:
        found.update(getattr(op, "rids", ()))
        if hasattr(op, "rid"):
            found.add(op.rid)
    return found


def _without(op, rid: int):
    """`op` with request `rid` taken out: None when the op is about `rid` alone."""
    if getattr(op, "rid", None) == rid:
        return None
    if isinstance(op, Extend) and rid in op.rids:
        keep = [(r, n) for r, n in zip(op.rids, op.lens) if r != rid]
        if not keep:
            return None
        return replace(op, rids=tuple(r for r, _ in keep), lens=tuple(n for _, n in keep))
    if "rids" in {f.name for f in fields(op)} and rid in op.rids:
        rids = tuple(r for r in op.rids if r != rid)
        return replace(op, rids=rids) if rids else None
    if getattr(op, "share_from", None) == rid:
        return replace(op, share_from=None, share_pages=0)
    return op
