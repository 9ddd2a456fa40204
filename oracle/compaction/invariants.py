"""Invariants I1-I11 of the compaction model (spec §8.6), over plain `PoolSnapshot`s, so they check
the model and any implementation alike. Every violation is collected, with its numbers.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.oracle.compaction.model import Geometry, geometries
from kvfuzz.strategies.compaction.trace import Params, PoolSnapshot


def span_pages(geo: Geometry, snap: PoolSnapshot) -> range:
    """Clamped to real pages, so a wild watermark is reported (I3) rather than crashing here."""
    if geo.up:
        return range(geo.reserved, max(geo.reserved, min(snap.wm, geo.num_pages)))
    return range(max(snap.wm + 1, 1), geo.num_pages)


def low_high_bytes(geo: Geometry, snap: PoolSnapshot) -> tuple[int, int]:
    if geo.up:
        return geo.reserved * geo.epp, snap.wm * geo.epp
    return (snap.wm + 1) * geo.epp, geo.num_pages * geo.epp


def state_violations(params: Params, lazy: bool, snaps: dict[str, PoolSnapshot],
                     stamps: dict[str, dict[int, bytes]],
                     data: dict[str, dict[int, bytes]]) -> list[str]:
    """I1-I8 and I10 after any operation. `stamps`: what was written per live vid; `data`: read."""
    geos = geometries(params)
    problems = []
    for name, snap in snaps.items():
        problems += pool_violations(geos[name], lazy, snap, stamps[name], data[name])
    return problems + chain_violations(params, lazy, snaps)


def pool_violations(geo: Geometry, lazy: bool, snap: PoolSnapshot, stamps: dict[int, bytes],
                    data: dict[int, bytes]) -> list[str]:
    """I1-I7 of one pool; a pure function of its arguments, so callers may skip a repeat."""
    found = (_anchor(geo, snap) + _bijection(snap) + _containment(geo, snap)
             + _partition(geo, snap, lazy) + _vids(geo, snap) + _data(stamps, data))
    return [f"{geo.name}: {problem}" for problem in found]


def chain_violations(params: Params, lazy: bool, snaps: dict[str, PoolSnapshot]) -> list[str]:
    """I8 and I10, which look at both pools."""
    return _frontiers_and_avail(params, lazy, geometries(params), snaps)


def _anchor(geo: Geometry, snap: PoolSnapshot) -> list[str]:
    problems = []
    if (snap.v2p[0], snap.p2v[0]) != (0, 0):
        problems.append(f"I1 anchor: v2p[0]={snap.v2p[0]}, p2v[0]={snap.p2v[0]}, expected 0, 0")
    if (snap.v2p[-1], snap.p2v[-1]) != (-1, -1):
        problems.append(f"I1 sentinel: v2p[-1]={snap.v2p[-1]}, p2v[-1]={snap.p2v[-1]}, expected -1")
    if 0 in snap.free_vids:
        problems.append("I1 anchor: vid 0 is on the free list")
    return problems


def _bijection(snap: PoolSnapshot) -> list[str]:
    problems = []
    last = len(snap.p2v) - 1
    for vid, page in enumerate(snap.v2p[1:-1], start=1):
        if page != -1 and not (0 < page < last and snap.p2v[page] == vid):
            shown = snap.p2v[page] if 0 <= page < last else "out of range"
            problems.append(f"I2 vid {vid} -> page {page}, but p2v[{page}] = {shown}")
    for page, vid in enumerate(snap.p2v[1:-1], start=1):
        if vid != -1 and not (0 < vid < len(snap.v2p) - 1 and snap.v2p[vid] == page):
            shown = snap.v2p[vid] if 0 <= vid < len(snap.v2p) else "out of range"
            problems.append(f"I2 page {page} -> vid {vid}, but v2p[{vid}] = {shown}")
    return problems


def _containment(geo: Geometry, snap: PoolSnapshot) -> list[str]:
    span = span_pages(geo, snap)
    problems = []
    if not (geo.reserved - 1 <= snap.wm <= geo.num_pages):
        problems.append(f"I3 watermark {snap.wm} outside [{geo.reserved - 1}, {geo.num_pages}]")
    outside = [p for p in range(1, geo.num_pages) if p not in span and snap.p2v[p] != -1]
    if outside:
        problems.append(f"I3 pages outside the span {_range(span)} still bound: {outside[:8]}")
    for label, pages in (("hole", snap.holes), ("pending page", snap.pending_set),
                         ("reserved page", snap.reserved)):
        stray = [p for p in pages if p not in span]
        if stray:
            problems.append(f"I3 {label}s outside the span {_range(span)}: {stray[:8]}")
    return problems


def _partition(geo: Geometry, snap: PoolSnapshot, lazy: bool) -> list[str]:
    problems = []
    holes, pending = Counter(snap.holes), set(snap.pending_set)
    batches = Counter(p for _, pages in snap.pending for p in pages)
    if set(batches) != pending or max(batches.values(), default=1) > 1:
        lost = sorted(pending - set(batches))
        problems.append(f"I4 pending set {sorted(pending)[:8]} is not the disjoint union of the "
                        f"pending batches {list(snap.pending)[:4]} (in no batch: {lost[:8]})")
    repeated = sorted(p for p, count in holes.items() if count > 1)
    if repeated:
        problems.append(f"I4 repeated holes {repeated[:8]}")
    both = sorted(set(holes) & pending)
    if both:
        problems.append(f"I4 pages both hole and pending: {both[:8]}")
    reserved = set(snap.reserved)
    handed = sorted(reserved & (set(holes) | pending))  # a reservation is no one else's
    if handed or len(reserved) != len(snap.reserved):
        problems.append(f"I4 reserved pages {list(snap.reserved)[:8]} repeated, or also holes "
                        f"or pending: {handed[:8]}")
    bound = sorted(p for p in set(holes) | pending | reserved
                   if 0 <= p < len(snap.p2v) and snap.p2v[p] != -1)
    if bound:
        problems.append(f"I4 hole, pending or reserved pages bound in p2v: "
                        f"{[(p, snap.p2v[p]) for p in bound[:8]]}")
    span = span_pages(geo, snap)
    live_pages = sum(1 for p in span if snap.p2v[p] >= 0)
    if len(span) != live_pages + len(holes) + len(pending) + len(reserved):
        problems.append(f"I5 span {len(span)} != live pages {live_pages} + holes {len(holes)} "
                        f"+ pending {len(pending)} + reserved {len(reserved)}")
    live_vids = sum(1 for page in snap.v2p[1:-1] if page != -1)
    if snap.live != live_vids + len(reserved):  # a reservation's pages are in use, vid or not
        problems.append(f"I5 live counter {snap.live} != {live_vids} vids bound in v2p + "
                        f"{len(reserved)} reserved pages")
    if snap.loading != len(snap.reserved):
        problems.append(f"I5 {snap.loading} pages wait for a load-back, {len(snap.reserved)} "
                        f"are reserved")
    if not lazy and (holes or pending or len(span) != snap.live):
        problems.append(f"I5 eager band not hole-free: span {len(span)}, live {snap.live}, "
                        f"holes {len(holes)}, pending {len(pending)}")
    return problems


def _vids(geo: Geometry, snap: PoolSnapshot) -> list[str]:
    free = Counter(snap.free_vids)
    live = {vid for vid, page in enumerate(snap.v2p[:-1]) if page != -1 and vid != 0}
    problems = []
    repeated = sorted(vid for vid, count in free.items() if count > 1)
    if repeated:
        problems.append(f"I6 repeated free vids {repeated[:8]}")
    if set(free) & live:
        problems.append(f"I6 vids both free and live: {sorted(set(free) & live)[:8]}")
    expected = set(range(geo.reserved, geo.num_pages))
    if set(free) | live != expected:
        lost, extra = expected - set(free) - live, (set(free) | live) - expected
        problems.append(f"I6 vids lost {sorted(lost)[:8]}, vids out of range {sorted(extra)[:8]}")
    return problems


def _data(stamps: dict[int, bytes], data: dict[int, bytes]) -> list[str]:
    problems = []
    if set(stamps) != set(data):
        problems.append(f"I7 live vids {sorted(data)[:8]} differ from stamped vids "
                        f"{sorted(stamps)[:8]}")
    wrong = [vid for vid in sorted(stamps) if vid in data and data[vid] != stamps[vid]]
    for vid in wrong[:4]:
        problems.append(f"I7 vid {vid} reads {data[vid].hex()}, stamped {stamps[vid].hex()}")
    if len(wrong) > 4:
        problems.append(f"I7 ... {len(wrong) - 4} more vids read the wrong data")
    return problems


def _frontiers_and_avail(params: Params, lazy: bool, geos: dict[str, Geometry],
                         snaps: dict[str, PoolSnapshot]) -> list[str]:
    problems = []
    bands = {name: low_high_bytes(geos[name], snap) for name, snap in snaps.items()}
    up_high = bands["up"][1]
    down_low = bands["down"][0] if "down" in bands else params.total_bytes
    if not 0 <= up_high <= down_low <= params.total_bytes:
        problems.append(f"I8 frontiers cross: up high byte {up_high}, down low byte {down_low}, "
                        f"total {params.total_bytes}")
    for name, snap in snaps.items():
        geo = geos[name]
        gap = max(0, down_low - up_high) if "down" in bands else params.total_bytes - up_high
        room = geo.num_pages - geo.reserved - len(span_pages(geo, snap))
        expected = min(gap // geo.epp, room) + (len(snap.holes) if lazy else 0)
        if snap.avail != expected:
            problems.append(f"{name}: I10 avail {snap.avail} != min(gap {gap} // epp {geo.epp}, "
                            f"room {room}) + holes = {expected}")
    return problems


def _range(span: range) -> str:
    return f"[{span.start}, {span.stop})"
