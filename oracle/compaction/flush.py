"""Compaction in the reference model: the lazy `_flush` walk and commit (spec §3.6-§3.8), and
eager compaction at free time (§3.4). Plain Python, one page at a time.

Pools are `model.ModelPool`s (duck-typed here to avoid an import cycle).
"""

from __future__ import annotations

from typing import Callable

Fired = Callable[[int | None], bool]


def lazy_drain(pool, urgent: bool, fired: Fired) -> None:
    """§3.8: pending batches whose event fired (all of them if urgent) become holes again."""
    for event in list(pool.pending):
        if urgent or fired(event):
            pool.holes.extend(pool.pending.pop(event))


def lazy_flush(pool, urgent: bool, fired: Fired, kv: bytearray, move_cap: int) -> int:
    """§3.6: drain, sort, absorb the boundary, walk, commit once, exit. Returns the move count."""
    lazy_drain(pool, urgent, fired)
    holes = sorted(pool.holes)
    absorbed = 0
    if pool.up:
        while absorbed < len(holes) and holes[-1 - absorbed] == pool.wm - 1 - absorbed:
            absorbed += 1
        pool.wm -= absorbed
        interior = holes[:len(holes) - absorbed]
    else:
        while absorbed < len(holes) and holes[absorbed] == pool.wm + 1 + absorbed:
            absorbed += 1
        pool.wm += absorbed
        interior = holes[absorbed:]
    pool.holes = list(interior)
    latest = pool.latest_event
    full_pack = urgent and bool(interior)
    if full_pack:  # settle: wait for the forward on the stream, never mark its event fired
        pool.inflight, latest = None, None
    pairs = _walk(pool, interior, urgent, _write_set(pool, fired), move_cap)
    released = _commit(pool, pairs, latest, fired, kv)
    if full_pack:  # every live page now lies below the retreated frontier (§3.6 step 8)
        pool.wm += -len(interior) if pool.up else len(interior)
        pool.holes = []
    else:  # consumed destinations come off the deep end; only then may released sources join
        consumed = len(pairs)
        pool.holes = interior[consumed:] if pool.up else interior[:len(interior) - consumed]
        pool.holes += released
    return len(pairs)


def _write_set(pool, fired: Fired) -> set[int]:
    if pool.inflight is None or fired(pool.inflight[0]):
        return set()
    return {max(pool.v2p[vid], 0) for vid in pool.inflight[1]}


def _walk(pool, interior: list[int], urgent: bool, blocked: set[int], move_cap: int):
    """Move the topmost survivor into the deepest interior hole, until a stop rule fires."""
    skip = set(interior) | pool.pending_set()
    step = -1 if pool.up else 1
    end = pool.geo.reserved - 1 if pool.up else pool.geo.num_pages
    page = pool.wm - 1 if pool.up else pool.wm + 1
    pairs = []
    while len(pairs) < len(interior):
        while page != end and page in skip:
            page += step
        if page == end:
            break  # no survivor left
        if not urgent and page in blocked:
            break  # a write-race blocker halts the whole non-urgent walk
        dst = interior[len(pairs)] if pool.up else interior[-1 - len(pairs)]
        if (page < dst) if pool.up else (page > dst):
            break  # the pointers crossed: the band is packed
        pairs.append((page, dst))
        page += step  # never rewind (§8.8.2)
        if not urgent and len(pairs) >= move_cap:
            break
    return pairs


def _commit(pool, pairs, latest: int | None, fired: Fired, kv: bytearray) -> list[int]:
    """§3.7: one batch. Returns the sources released at once; the rest are filed as pending."""
    if not pairs:
        return []
    srcs = [src for src, _ in pairs]
    vids = [pool.p2v[src] for src in srcs]
    if min(vids) < 0:
        raise AssertionError(f"{pool.geo.name}: ghost source pages {srcs} map to vids {vids}")
    _copy_pages(pool, pairs, kv)
    for (src, dst), vid in zip(pairs, vids):
        pool.v2p[vid], pool.p2v[dst] = dst, vid
    for src in srcs:
        pool.p2v[src] = -1
    pool.num_moves += len(pairs)
    if fired(latest):
        return srcs
    pool.pending.setdefault(latest, []).extend(srcs)  # accumulate, never replace (PR 39982)
    return []


def _copy_pages(pool, pairs, kv: bytearray) -> None:
    epp = pool.geo.epp
    payloads = [bytes(kv[src * epp:(src + 1) * epp]) for src, _ in pairs]  # all reads first
    for (_, dst), payload in zip(pairs, payloads):
        kv[dst * epp:(dst + 1) * epp] = payload


def eager_free(pool, vids: list[int], kv: bytearray) -> None:
    """§3.4: unbind, then move the live pages of the vacated band into the freed pages below it."""
    vids = sorted(set(vids))
    pages = [pool.v2p[vid] for vid in vids]
    if min(pages, default=0) < 0:
        raise ValueError(f"{pool.geo.name}: double free of vids {vids} (pages {pages})")
    for vid in vids:
        pool.v2p[vid] = -1
    pool.free_vids.extend(vids)
    pool.live -= len(vids)
    freed = set(pages)
    if pool.up:
        new_wm = pool.wm - len(vids)
        band = range(new_wm, pool.wm)
        dsts = sorted(page for page in pages if page < new_wm)
    else:
        new_wm = pool.wm + len(vids)
        band = range(pool.wm + 1, new_wm + 1)
        dsts = sorted(page for page in pages if page > new_wm)
    srcs = [page for page in band if page not in freed]
    if len(srcs) != len(dsts):
        raise AssertionError(f"{pool.geo.name}: eager band has {len(srcs)} live pages "
                             f"but {len(dsts)} freed pages outside it")
    pairs = list(zip(srcs, dsts))
    _copy_pages(pool, pairs, kv)
    for src, dst in pairs:
        vid = pool.p2v[src]
        pool.v2p[vid], pool.p2v[dst] = dst, vid
    for page in band:
        pool.p2v[page] = -1
    pool.wm = new_wm
    pool.num_moves += len(pairs)
