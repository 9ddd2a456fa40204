"""Caller bugs on purpose: turns an swa `Misuse` op into the wrong call it stands for, where the
trace's checks see it (`strategies/swa/scheduler_ops.py`: `MISUSES`); the oracle says each is
rejected with nothing changed. Where they do not see it, or no live request offers the slots,
the op resolves to nothing (the released class would take it and corrupt its pools)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, short
from kvfuzz.strategies.swa.scheduler_ops import Misuse


def misuse_call(lock, op: Misuse) -> Call | None:
    """The wrong call, or None; never one through a call the class does not have
    (`lock.absent`): its AttributeError would pass for the rejection the oracle expects."""
    call = _misuse_call(lock, op)
    if call is not None and call.method in getattr(lock, "absent", ()):
        return None
    return call


def _misuse_call(lock, op: Misuse) -> Call | None:
    P, trace, salt = lock.P, lock.trace, op.salt
    rows = {rid: row for rid, row in lock.rows.items() if row and rid not in lock.cached}
    if op.kind == "alloc_paged":
        if P == 1:
            return None  # alloc is the page-size-1 call
        n = 1 + salt % (2 * P)
        return Call(f"alloc_paged: alloc({n}) at page size {P}", "alloc", (n,))
    if op.kind == "swa_evicted_twice":
        if not (trace.strict or (trace.debug and P > 1)):
            return None
        moved = [rid for rid in sorted(rows) if lock.evicted[rid] > 0]
        if not moved:
            return None
        rid = moved[salt % len(moved)]
        row, evicted = rows[rid], lock.evicted[rid]
        start = list(range(0, evicted, P))[salt // 2 % -(-evicted // P)]
        end = min(len(row), start + P * (1 + salt // 3 % 3))  # may reach into the window
        return _segment("swa_evicted_twice", salt, rid, row[start:end], start,
                        f"of r{rid}, whose window starts at {evicted}")
    if op.kind == "full_while_mapped":
        if not trace.strict:
            return None
        mapped = [rid for rid in sorted(rows) if lock.evicted[rid] < len(rows[rid])]
        if not mapped:
            return None
        rid = mapped[salt % len(mapped)]
        row, evicted = rows[rid], lock.evicted[rid]
        start = -(-evicted // P) * P  # the first page start in the window
        if salt % 2 and start < len(row):
            return Call(f"full_while_mapped: free_full_segment({short(row[start:], 40)}, "
                        f"start_pos={start}) of r{rid}, whose window starts at {evicted}",
                        "free_full_segment", (row[start:], start))
        start = evicted + salt // 2 % (len(row) - evicted)
        return Call(f"full_while_mapped: free_full({short(row[start:], 40)}) of r{rid}, "
                    f"whose window starts at {evicted}", "free_full", (row[start:],))
    if op.kind in ("tail_batch", "tail_outside"):
        return _tail(lock, op)
    if op.kind == "paged_at_token":
        return _paged_at_token(P, salt)
    if op.kind == "segment_unaligned":
        inside = [(rid, at) for rid in sorted(rows) for at in
                  range(lock.evicted[rid] + 1, len(rows[rid])) if at % P]
        if not inside:
            return None  # page size 1, or no window of two tokens
        rid, start = inside[salt % len(inside)]
        return _segment("segment_unaligned", salt, rid, rows[rid][start:], start,
                        f"of r{rid}: from inside a page")
    raise ValueError(f"unknown misuse {op.kind!r}")


def _tail(lock, op: Misuse) -> Call | None:
    """`alloc_extend_swa_tail` continuing live requests by a few tokens: two of them at once
    (`tail_batch`), or one with a tail past its extend or below 0 (`tail_outside`)."""
    P, salt = lock.P, op.salt
    live = sorted(rid for rid in lock.rows if rid not in lock.cached)
    wanted = 2 if op.kind == "tail_batch" else 1
    if P == 1 or len(live) < wanted:
        return None
    rids = [live[(salt + k) % len(live)] for k in range(wanted)]
    grow = 1 + salt % (2 * P)
    prefix = [len(lock.rows[rid]) for rid in rids]
    last = [lock.rows[rid][-1] if lock.rows[rid] else -1 for rid in rids]
    seq = [q + grow for q in prefix]
    tail = (grow + 1 + salt // 2 % P if salt % 2 else -1 - salt // 2 % 3) \
        if op.kind == "tail_outside" else grow
    return Call(f"{op.kind}: alloc_extend_swa_tail(prefix_lens={prefix}, seq_lens={seq}, "
                f"last_loc={last}, swa_tail_len={tail})", "alloc_extend_swa_tail",
                (prefix, seq, last, tail))


def _paged_at_token(P: int, salt: int) -> Call | None:
    """A paged call for a fresh request of a few tokens, at page size 1 (no pool slot is
    named: the call is refused before it reads one)."""
    if P != 1:
        return None
    n = 1 + salt % 4
    method, args = (("alloc_extend", ([0], [n], [-1])), ("alloc_decode", ([n], [-1])),
                    ("alloc_extend_swa_tail", ([0], [n], [-1], n)))[salt % 3]
    return Call(f"paged_at_token: {method}{args} at page size 1", method, args)


def _segment(kind: str, salt: int, rid: int, slots: list[int], start: int, what: str) -> Call:
    """The SWA release by segment (even `salt`), or the release of both pools by segment,
    whose SWA side runs first (odd)."""
    method = "free_segment" if salt % 2 else "free_swa_segment"
    return Call(f"{kind}: {method}({short(slots, 40)}, start_pos={start}) {what}", method,
                (slots, start))
