"""Caller bugs on purpose: turns a `Misuse` op into the wrong call it stands for. The oracle
(`oracle.allocator`) says each must be rejected with nothing observable changed (debug mode),
except the free-group kinds, judged in every mode: a nested begin is rejected, an end with no
group open does nothing."""

from __future__ import annotations

from kvfuzz.fuzz.allocator.scheduler import Planned, Scheduler
from kvfuzz.oracle.allocator.model import AllocatorModel
from kvfuzz.strategies.allocator.trace import Misuse


def misuse_call(sched: Scheduler, op: Misuse, model: AllocatorModel) -> Planned | None:
    """The wrong call `op` stands for now; None where it cannot be made or seen (debug checks
    off, or inside a free group, where releases are only staged)."""
    if op.kind == "group_begin_nested":
        return Planned("group_begin", (), "group_begin_nested: free_group_begin() inside an open "
                       "group", misuse=op.kind) if sched.group_open else None
    if op.kind == "group_end_unopened":
        return None if sched.group_open else Planned(
            "group_end", (), "group_end_unopened: free_group_end() with no group open",
            release=("group", False), misuse=op.kind)
    if not sched.debug or sched.group_open:
        return None
    P, salt, kind = sched.P, op.salt, op.kind
    available = set(model.free) | set(model.staged)
    if kind == "double_free":
        # The latest release whose pages are all still free: no later call reused them.
        for slots in reversed(sched.released):
            if {s // P for s in slots} <= available:
                return _free(P, slots, salt, kind, "the slots of an earlier release again")
        return None
    if kind == "free_page0":
        return _free(P, list(range(P)), salt, kind, "page 0 (the padding page)")
    if kind == "free_unallocated":
        if not model.free:
            return None
        page = model.free[salt % len(model.free)]
        return _free(P, [page * P + salt % P], salt, kind, f"page {page}, never handed out")
    if kind == "free_out_of_range":
        page = model.num_pages + 1 + salt % 3
        return _free(P, [page * P + o for o in range(P)], salt, kind, f"page {page}, past the pool")
    return _bad_last_loc(sched, salt)


def _free(P: int, slots: list[int], salt: int, kind: str, what: str) -> Planned:
    pages = list(dict.fromkeys(s // P for s in slots))
    how = ("free", "page_ids", "segment")[salt % 3]
    if how == "free":
        return Planned("free_slots", (slots,), f"{kind}: free({slots[:8]}) of {what}", misuse=kind)
    if how == "page_ids":
        return Planned("free_page_ids", (pages,), f"{kind}: free_page_ids({pages}) of {what}",
                       misuse=kind)
    whole = [page * P + o for page in pages for o in range(P)]
    return Planned("free_segment", (whole, 0), f"{kind}: free_segment({whole[:8]}, start_pos=0) "
                   f"of {what}", misuse=kind)


def _bad_last_loc(sched: Scheduler, salt: int) -> Planned | None:
    """last_loc one past the scheduler's value: breaks (last_loc + 1) % P == prefix_len % P.
    Undetectable for P == 1 (every slot satisfies it), so the op resolves to nothing there."""
    live = sorted(sched.rows)
    if sched.P == 1 or not live:
        return None
    rid = live[salt % len(live)]
    row = sched.rows[rid]
    last = (row[-1] if row else -1) + 1
    if salt % 2 and row:
        return Planned("alloc_decode", ([len(row) + 1], [last]),
                       f"bad_last_loc: alloc_decode(seq_lens={[len(row) + 1]}, last_loc={[last]}) "
                       f"for r{rid}, whose last slot is {row[-1]}", misuse="bad_last_loc")
    return Planned("alloc_extend", ([len(row)], [len(row) + 1], [last], None),
                   f"bad_last_loc: alloc_extend(prefix_lens={[len(row)]}, "
                   f"seq_lens={[len(row) + 1]}, last_loc={[last]}) for r{rid}, whose last slot "
                   f"is {row[-1] if row else -1}",
                   misuse="bad_last_loc")
