"""Caller bugs on purpose: turns a `Misuse` op into the wrong call it stands for. The oracle
(`oracle.allocator`) says each must be rejected with nothing observable changed (debug mode),
except the free-group kinds and an unaligned `free_segment`, judged in every mode: a nested
begin is rejected, an end with no group open does nothing, a segment starting inside a page is
rejected."""

from __future__ import annotations

from kvfuzz.fuzz.allocator.scheduler import Planned, Scheduler
from kvfuzz.oracle.allocator.model import AllocatorModel
from kvfuzz.strategies.allocator.profile import SEEN_AFTER_RELEASE
from kvfuzz.strategies.allocator.trace import FREE_HOWS, Misuse


def misuse_call(sched: Scheduler, op: Misuse, model: AllocatorModel,
                hows=FREE_HOWS) -> Planned | None:
    """The wrong call `op` stands for now; None where it cannot be made or seen (debug checks
    off, or inside a free group, where releases are only staged)."""
    if op.kind == "group_begin_nested":
        return Planned("group_begin", (), "group_begin_nested: free_group_begin() inside an open "
                       "group", misuse=op.kind) if sched.group_open else None
    if op.kind == "group_end_unopened":
        return None if sched.group_open else Planned(
            "group_end", (), "group_end_unopened: free_group_end() with no group open",
            release=("group", False), misuse=op.kind)
    if op.kind == "segment_unaligned":
        return _unaligned_segment(sched, op.salt)
    if not sched.debug or (sched.group_open and not (model.after and kind_seen_after(op.kind))):
        return None  # inside a group a release is only staged, unless checked at its end
    P, salt, kind = sched.P, op.salt, op.kind
    available = set(model.free) | set(model.staged)
    if kind == "double_free":
        # The latest release whose pages are all still free: no later call reused them.
        for slots in reversed(sched.released):
            if {s // P for s in slots} <= available:
                return _free(P, hows, slots, salt, kind,
                             "the slots of an earlier release again")
        return None
    if kind == "free_page0":
        return _free(P, hows, list(range(P)), salt, kind, "page 0 (the padding page)")
    if kind == "free_unallocated":
        if not model.free:
            return None
        page = model.free[salt % len(model.free)]
        return _free(P, hows, [page * P + salt % P], salt, kind,
                     f"page {page}, never handed out")
    if kind == "alloc_unaligned":
        if P == 1:
            return None  # every size is a whole number of pages
        need = (salt % 3) * P + 1 + salt % (P - 1)
        return Planned("alloc", (need,), f"alloc_unaligned: alloc({need}), not a multiple of "
                       f"the page size {P}", misuse=kind)
    if kind == "segment_gapped":
        return _gapped_segment(sched, salt)
    if kind == "free_out_of_range":
        page = model.num_pages + 1 + salt % 3
        return _free(P, hows, [page * P + o for o in range(P)], salt, kind,
                     f"page {page}, past the pool")
    return _bad_last_loc(sched, salt)


def _free(P: int, hows, slots: list[int], salt: int, kind: str, what: str) -> Planned:
    """The release `salt` picks among the calls the class has (`hows`)."""
    pages = list(dict.fromkeys(s // P for s in slots))
    calls = [how for how in ("free", "page_ids", "segment") if how in hows]
    how = calls[salt % len(calls)]
    if how == "free":
        return Planned("free_slots", (slots,), f"{kind}: free({slots[:8]}) of {what}", misuse=kind)
    if how == "page_ids":
        return Planned("free_page_ids", (pages,), f"{kind}: free_page_ids({pages}) of {what}",
                       misuse=kind)
    whole = [page * P + o for page in pages for o in range(P)]
    return Planned("free_segment", (whole, 0), f"{kind}: free_segment({whole[:8]}, start_pos=0) "
                   f"of {what}", misuse=kind)


def _bad_last_loc(sched: Scheduler, salt: int) -> Planned | None:
    """last_loc 1 to P - 1 past the scheduler's value (by `salt`, so its remainder lands above
    and below the right one): breaks (last_loc + 1) % P == prefix_len % P. Undetectable for
    P == 1 (every slot satisfies it), so the op resolves to nothing there."""
    live = sorted(sched.rows)
    if sched.P == 1 or not live:
        return None
    rid = live[salt % len(live)]
    row = sched.rows[rid]
    last = (row[-1] if row else -1) + 1 + salt // 2 % (sched.P - 1)
    if salt % 2 and row:
        return Planned("alloc_decode", ([len(row) + 1], [last]),
                       f"bad_last_loc: alloc_decode(seq_lens={[len(row) + 1]}, last_loc={[last]}) "
                       f"for r{rid}, whose last slot is {row[-1]}", misuse="bad_last_loc")
    return Planned("alloc_extend", ([len(row)], [len(row) + 1], [last], None),
                   f"bad_last_loc: alloc_extend(prefix_lens={[len(row)]}, "
                   f"seq_lens={[len(row) + 1]}, last_loc={[last]}) for r{rid}, whose last slot "
                   f"is {row[-1] if row else -1}",
                   misuse="bad_last_loc")


def _unaligned_segment(sched: Scheduler, salt: int) -> Planned | None:
    """The tail of a live request's row from a position inside a page, as a `free_segment`:
    rejected before anything changes, in a group too. None at page size 1 (every start is
    aligned) or with no row of two tokens."""
    live = [rid for rid in sorted(sched.rows) if len(sched.rows[rid]) > 1]
    if sched.P == 1 or not live:
        return None
    rid = live[salt % len(live)]
    row = sched.rows[rid]
    starts = [position for position in range(1, len(row)) if position % sched.P]
    start = starts[salt % len(starts)]
    slots = row[start:]
    return Planned("free_segment", (slots, start),
                   f"segment_unaligned: free_segment({len(slots)} slots {slots[:6]}, "
                   f"start_pos={start}) of r{rid}'s row", misuse="segment_unaligned")


def _gapped_segment(sched: Scheduler, salt: int) -> Planned | None:
    """A live row's tail from a page start with its first page cut to one slot: when the tail
    ends inside a page, its every P-th slot then misses that last page. Rejected (debug) before
    anything changes; None where no row has such a tail."""
    P = sched.P
    for rid in sorted(sched.rows, key=lambda r: (r + salt) % 97):
        row = sched.rows[rid]
        if P > 1 and len(row) > P and len(row) % P:
            start = (len(row) - 1) // P * P - P  # the last whole page before the partial one
            slots = row[start:start + 1] + row[start + P:]
            return Planned("free_segment", (slots, start),
                           f"segment_gapped: free_segment({len(slots)} slots {slots[:6]}, "
                           f"start_pos={start}) of r{rid}'s tail without {P - 1} slots of its "
                           f"first page", misuse="segment_gapped")
    return None


def kind_seen_after(kind: str) -> bool:
    """A release misuse a class checking after the release sees inside a group too, at its end."""
    return kind in SEEN_AFTER_RELEASE
