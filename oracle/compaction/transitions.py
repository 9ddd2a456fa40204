"""Invariants of one operation, from the pool snapshots before and after it (spec §8.6):
I9 flush postconditions, I10 alloc never refuses what `avail()` promised, I11 pending safety.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.oracle.compaction.model import Geometry
from kvfuzz.strategies.compaction.trace import PoolSnapshot


def _live(snap: PoolSnapshot) -> dict[int, int]:
    return {vid: page for vid, page in enumerate(snap.v2p[:-1]) if page != -1 and vid != 0}


def _span(geo: Geometry, snap: PoolSnapshot) -> int:
    return snap.wm - geo.reserved if geo.up else geo.num_pages - 1 - snap.wm


def flush_violations(geo: Geometry, before: PoolSnapshot, after: PoolSnapshot, moves: int,
                     urgent: bool, move_cap: int) -> list[str]:
    """I9. Data stability (I7) is checked after every op anyway. With a load-back reservation
    held, a flush moves nothing and changes nothing but fired pending batches into holes."""
    if before.loading:
        if moves or (after.wm, after.v2p, after.num_moves) != (before.wm, before.v2p,
                                                               before.num_moves):
            return [f"I9 flush moved {moves} pages (wm {before.wm} -> {after.wm}, move counter "
                    f"{before.num_moves} -> {after.num_moves}) while {before.loading} pages "
                    f"were reserved for a load-back"]
        return []
    problems = []
    live_before, live_after = _live(before), _live(after)
    if after.live != before.live or set(live_after) != set(live_before):
        problems.append(f"I9 flush changed the live set: {before.live} -> {after.live} pages")
    if _span(geo, after) > _span(geo, before):
        problems.append(f"I9 flush grew the span {_span(geo, before)} -> {_span(geo, after)}")
    moved = {vid: (page, live_after.get(vid)) for vid, page in live_before.items()
             if live_after.get(vid) != page}
    if len(moved) != moves or after.num_moves - before.num_moves != moves:
        problems.append(f"I9 flush reported {moves} moves, {len(moved)} vids changed page, "
                        f"move counter rose by {after.num_moves - before.num_moves}")
    if moves > len(before.holes) + len(before.pending_set):
        problems.append(f"I9 {moves} moves exceed the {len(before.holes)} holes and "
                        f"{len(before.pending_set)} pending pages there were")
    outward = {vid: pair for vid, pair in moved.items()
               if pair[1] is not None and (pair[1] > pair[0] if geo.up else pair[1] < pair[0])}
    if outward:
        shown = dict(list(outward.items())[:6])
        problems.append(f"I9 moves away from the base (vid: (from, to)): {shown}")
    if not urgent:
        if moves > move_cap:
            problems.append(f"I9 non-urgent flush made {moves} moves over the cap {move_cap}")
        written = {before.v2p[vid] for vid in before.inflight}
        raced = sorted(src for src, _ in moved.values() if src in written)
        if raced:
            problems.append(f"I9 non-urgent flush moved pages {raced}, written by an unfired "
                            f"forward")
    elif after.holes or after.pending_set or _span(geo, after) != after.live:
        problems.append(f"I9 urgent flush left holes {list(after.holes)[:8]}, pending "
                        f"{list(after.pending_set)[:8]}, span {_span(geo, after)}, "
                        f"live {after.live}")
    return problems


def alloc_violations(before: PoolSnapshot, after: PoolSnapshot, n: int,
                     result: list[int] | None) -> list[str]:
    """I10 and I11 for an alloc of `n` pages that returned `result` (vids, or None)."""
    if result is None:
        if n <= before.avail:
            return [f"I10 alloc of {n} returned None with avail {before.avail}"]
        return []
    problems = []
    if list(result) != list(before.free_vids[:n]):
        problems.append(f"I6 alloc returned vids {list(result)[:8]}, the free-list front was "
                        f"{list(before.free_vids[:n])[:8]}")
    pages = [after.v2p[vid] if 0 <= vid < len(after.v2p) else -1 for vid in result]
    reused = sorted(set(pages) & set(before.pending_set))
    if reused:
        problems.append(f"I11 alloc handed out pending pages {reused} before their event fired")
    taken = sorted(set(pages) & set(before.reserved))
    if taken:
        problems.append(f"I11 alloc handed out pages {taken} reserved for a load-back")
    if len(set(pages)) != len(pages) or min(pages, default=0) < 0:
        problems.append(f"I2 alloc bound vids {list(result)[:8]} to pages {pages[:8]}")
    return problems


def drain_violations(before: PoolSnapshot, after: PoolSnapshot) -> list[str]:
    """I11: a drain only moves pages from pending to holes."""
    problems = []
    released = set(before.pending_set) - set(after.pending_set)
    if not set(after.pending_set) <= set(before.pending_set):
        problems.append(f"I11 drain created pending pages "
                        f"{sorted(set(after.pending_set) - set(before.pending_set))[:8]}")
    expected = Counter(before.holes) + Counter(released)
    if Counter(after.holes) != expected:
        problems.append(f"I11 drain left holes {list(after.holes)[:8]}, expected "
                        f"{sorted(expected.elements())[:8]}")
    if (after.wm, after.live, after.v2p) != (before.wm, before.live, before.v2p):
        problems.append(f"I11 drain changed wm {before.wm}->{after.wm} or live "
                        f"{before.live}->{after.live} or v2p")
    return problems
