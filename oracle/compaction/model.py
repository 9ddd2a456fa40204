"""Reference model of the unified-memory lazy-compaction allocator (spec §8): an up and a down pool
on one byte buffer, plain Python lists, one page at a time. It is the specification in code.

Design note (kvfuzz issue 4)
- Model, `impl/compaction` and the harness all speak `strategies/compaction`: a `Trace` of ops
  whose page choices (`Pick`) are resolved at run time against the oracle's live pages in depth
  order, so a shrunk or hand-edited trace is always valid and never double-frees.
- Pages are 1 token (spec §8.2 allows ps = 1): all compaction logic is page-level.
- Each pool: `wm`, `live`, `v2p`/`p2v` (index 0 = padding anchor, last = -1 sentinel), a FIFO of
  free vids, unsorted `holes`, `pending` = event -> accumulated source pages (spec §3.7, PR 39982).
- The KV store is ONE bytearray for both pools (§8.3 option b): page p of a pool owns bytes
  [p*epp, (p+1)*epp), so a frontier overlap corrupts the other pool's stamps (caught by I7).
- Events are ids with a fired flag. An urgent flush with interior holes "settles": it drops the
  pool's write set and files nothing as pending, without marking the event fired (§8.4).
- Ordering details mirrored from upstream, so that tables match op for op: lazy take drains holes
  from the front, extends the frontier first (a failure changes nothing), emits a down extension
  descending when mixed with drained holes; eager free appends sorted vids, lazy free as given.
- Deviations: eager mode counts `live` (upstream leaves it 0) so I5 can be checked uniformly;
  the extension check is byte-exact for both pools (§8.8.6), and allocation gates on `avail()`.
- The ladder: an alloc beyond `avail()` urgently flushes the other pool, re-checks, else None.
- Invariants read only plain `PoolSnapshot`s, so they check the model and any implementation:
  I1-I8, I10 per state (`invariants.py`), I9-I11 per op
  (`transitions.py`). I12 (eager vs lazy) lives in `fuzz/compaction/i12.py`.
- The flush walk and eager compaction live in `flush.py`.
- Free groups (SGLang's `free_group_begin` / `free_group_end`, the scheduler's batching of a
  step's frees): a free inside a group is deferred, the vids kept in order; the end frees them
  all in one free (eager: one compaction of all of them); a nested begin is refused (`Refused`,
  nothing changes; SGLang 0.5.15-0.5.19 started the group afresh instead, finding C of
  docs/release-history.md), an end with no group open does nothing, and a `clear` forgets the group
  (what it deferred is free anyway). From the released class (sglang 0.5.23), not the spec.
- HiCache load-back reservations (SGLang's `alloc_physical` / `cancel_physical_reservation`,
  lazy pools): pages taken as an allocation takes them but bound to no vid (counted `live`, in
  the span, never a hole) until rolled back, when they become holes; while any is held the pool
  moves no page (a flush only drains fired pending batches, as a non-urgent drain), and a
  `clear` drops them all. From the released class (sglang 0.5.23), not the spec.
- Page sizes above 1 (`Params.page_size`): the model stays page-level (vids, pages, `avail` in
  pages); the calls that take tokens are the judge's to expand (`tokens.py`). One thing
  changes here: a free releases the distinct pages its tokens fall in, ascending, so its holes
  and freed vids are appended in that order, not as named (the released class's
  `torch.unique`; at page size 1 it passes the ids through). From sglang 0.5.23.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kvfuzz.oracle.compaction.flush import eager_free, lazy_drain, lazy_flush
from kvfuzz.oracle.compaction.tokens import pages_freed
from kvfuzz.strategies.compaction.trace import Params, PoolSnapshot


# Which freed pages (holes) a lazy allocation of n < len(holes) reuses. "front": the first n in
# the order they were freed (spec §3.1 step 3, §8.5). "base_end": the n nearest the pool's base,
# the rest kept sorted (upstream sglang 0.5.23, `_take_free_pages_from_end`). All of them when n
# covers the holes, in either.
TAKES = ("front", "base_end")


class Refused(Exception):
    """The released contract refuses this call (a nested `free_group_begin`); nothing changed."""


def _take_holes(pool, n: int, take: str) -> tuple[list[int], list[int]]:
    """(the pages taken, the holes left)."""
    if n == len(pool.holes) or take == "front":
        return pool.holes[:n], pool.holes[n:]
    ordered = sorted(pool.holes)
    if pool.up:
        return ordered[:n], ordered[n:]
    return ordered[len(ordered) - n:], ordered[:len(ordered) - n]


@dataclass(frozen=True)
class Geometry:
    """Fixed shape of one pool: grows up from `reserved`, or down from `num_pages - 1`."""

    name: str
    up: bool
    num_pages: int
    reserved: int  # R: pages [0, R) lie in the padding sink
    epp: int


def geometries(params: Params) -> dict[str, Geometry]:
    pools = {"up": (True, params.epp_up), "down": (False, params.epp_down)}
    return {name: Geometry(name, up, params.total_bytes // epp, -(-params.sink_bytes // epp), epp)
            for name, (up, epp) in pools.items() if name in params.pools()}


class ModelPool:
    def __init__(self, geo: Geometry, lazy: bool):
        self.geo, self.up, self.lazy = geo, geo.up, lazy
        self.wm = geo.reserved if geo.up else geo.num_pages - 1
        self.live = 0
        self.num_moves = 0
        self.v2p = [0] + [-1] * geo.num_pages
        self.p2v = [0] + [-1] * geo.num_pages
        self.free_vids = deque(range(geo.reserved, geo.num_pages))
        self.holes: list[int] = []
        self.pending: dict[int, list[int]] = {}
        self.inflight: tuple[int, list[int]] | None = None
        self.latest_event: int | None = None
        self.group: list[int] | None = None  # vids freed inside the open free group, in order
        self.reservations: list[list[int]] = []  # HiCache load-back reservations, oldest first

    @property
    def loading(self) -> int:
        """Pages reserved for a load-back (no page moves while there are any)."""
        return sum(len(pages) for pages in self.reservations)

    @property
    def span(self) -> int:
        return self.wm - self.geo.reserved if self.up else self.geo.num_pages - 1 - self.wm

    @property
    def low_byte(self) -> int:
        return (self.geo.reserved if self.up else self.wm + 1) * self.geo.epp

    @property
    def high_byte(self) -> int:
        return (self.wm if self.up else self.geo.num_pages) * self.geo.epp

    def pending_set(self) -> set[int]:
        return {page for pages in self.pending.values() for page in pages}

    def reserved_set(self) -> set[int]:
        return {page for pages in self.reservations for page in pages}


class CompactionModel:
    """The whole allocator: alloc, free, flush, drain, forward, fire, clear, write and read."""

    def __init__(self, params: Params, lazy: bool, take: str = "front"):
        """`take`: which freed pages a lazy allocation reuses (`TAKES`)."""
        if take not in TAKES:
            raise ValueError(f"take {take!r}: expected one of {', '.join(TAKES)}")
        self.params, self.lazy, self.take = params, lazy, take
        self.pools = {name: ModelPool(geo, lazy) for name, geo in geometries(params).items()}
        self.kv = bytearray(params.total_bytes)
        self.events: dict[int, bool] = {}  # event id -> fired

    def fired(self, event: int | None) -> bool:
        return event is None or self.events[event]

    def neighbour(self, name: str) -> ModelPool | None:
        return self.pools.get("down" if name == "up" else "up")

    def gap_bytes(self, name: str) -> int:
        pool, other = self.pools[name], self.neighbour(name)
        if pool.up:
            return max(0, (other.low_byte if other else self.params.total_bytes) - pool.high_byte)
        return max(0, pool.low_byte - (other.high_byte if other else 0))

    def avail(self, name: str) -> int:
        pool = self.pools[name]
        room = pool.geo.num_pages - pool.geo.reserved - pool.span
        holes = len(pool.holes) if self.lazy else 0  # pending pages are never counted (§8.8.7)
        return min(self.gap_bytes(name) // pool.geo.epp, room) + holes

    def alloc(self, name: str, n: int) -> list[int] | None:
        """`n` fresh vids bound to pages, or None with nothing changed but a neighbour flush."""
        pool, other = self.pools[name], self.neighbour(name)
        if n > self.avail(name) and other is not None:
            self.flush(other.geo.name, urgent=True)  # the shortfall ladder (§3.9)
        if n > self.avail(name) or n > len(pool.free_vids):
            return None
        vids = [pool.free_vids.popleft() for _ in range(n)]
        pages = self._take(pool, n)
        if pages is None:
            pool.free_vids.extendleft(reversed(vids))
            return None
        for vid, page in zip(vids, pages):
            pool.v2p[vid], pool.p2v[page] = page, vid
        return vids

    def _take(self, pool: ModelPool, n: int) -> list[int] | None:
        drained = min(n, len(pool.holes)) if self.lazy else 0
        extension = self._extend(pool, n - drained, descending=drained > 0)
        if extension is None:
            return None
        taken, pool.holes = _take_holes(pool, drained, self.take)
        pool.live += n
        return taken + extension

    def _extend(self, pool: ModelPool, m: int, descending: bool) -> list[int] | None:
        """Move the frontier by `m` pages if index bounds and the neighbour's bytes allow it."""
        if m == 0:
            return []
        name, geo = pool.geo.name, pool.geo
        if m > self.gap_bytes(name) // geo.epp or m > geo.num_pages - geo.reserved - pool.span:
            return None
        old = pool.wm
        if pool.up:
            pool.wm += m
            return list(range(old, old + m))
        pool.wm -= m
        run = list(range(pool.wm + 1, old + 1))
        return run[::-1] if descending else run

    def reserve(self, name: str, n: int) -> list[int] | None:
        """A load-back reservation of `n` pages (lazy): taken as `alloc` takes them, with the
        same shortfall ladder, but bound to no vid and needing no free vid; None: nothing
        changed but a neighbour flush."""
        other = self.neighbour(name)
        if n > self.avail(name) and other is not None:
            self.flush(other.geo.name, urgent=True)
        pages = self._take(self.pools[name], n) if n <= self.avail(name) else None
        if pages is not None:
            self.pools[name].reservations.append(pages)
        return pages

    def release(self, name: str, which: str) -> list[int]:
        """Roll back the oldest or newest reservation: its pages become holes, in its order."""
        pool = self.pools[name]
        pages = pool.reservations.pop(0 if which == "oldest" else -1)
        pool.holes += pages
        pool.live -= len(pages)
        return pages

    def free(self, name: str, vids: list[int]) -> None:
        pool = self.pools[name]
        unbound = [vid for vid in vids if not 0 < vid < len(pool.v2p) - 1 or pool.v2p[vid] < 0]
        if unbound or len(set(vids)) != len(vids):
            raise ValueError(f"{name}: free of unbound or repeated vids {unbound or vids}")
        if pool.group is not None:  # deferred to the group's end (the vids stay bound till then)
            if set(vids) & set(pool.group):
                raise ValueError(f"{name}: vids {sorted(set(vids) & set(pool.group))} freed "
                                 f"twice in one free group")
            pool.group += vids
            return
        vids = pages_freed(vids, self.params.page_size)  # above page size 1: ascending
        if not self.lazy:
            eager_free(pool, vids, self.kv)
            return
        for vid in vids:  # §3.5: tombstone both tables, record the page as a hole
            page = pool.v2p[vid]
            pool.v2p[vid], pool.p2v[page] = -1, -1
            pool.holes.append(page)
        pool.free_vids.extend(vids)
        pool.live -= len(vids)

    def free_group_begin(self, name: str) -> None:
        pool = self.pools[name]
        if pool.group is not None:
            raise Refused(f"{name}: free_group_begin with a free group open (groups cannot nest)")
        pool.group = []

    def free_group_end(self, name: str) -> None:
        """The group's frees as one free, in the order they came; nothing if no group is open."""
        pool = self.pools[name]
        deferred, pool.group = pool.group, None
        if deferred:
            self.free(name, deferred)

    def flush(self, name: str, urgent: bool) -> int:
        """The lazy flush; with a load-back reservation held, no page moves: fired pending
        batches alone rejoin the holes, urgent or not."""
        if not self.lazy:
            return 0
        if self.pools[name].reservations:
            lazy_drain(self.pools[name], False, self.fired)
            return 0
        return lazy_flush(self.pools[name], urgent, self.fired, self.kv, self.params.move_cap)

    def drain(self, name: str, urgent: bool) -> None:
        if self.lazy:
            lazy_drain(self.pools[name], urgent, self.fired)

    def forward(self, event: int, writes: dict[str, list[int]]) -> None:
        self.events[event] = False
        for name, pool in self.pools.items():
            pool.latest_event, pool.inflight = event, (event, list(writes.get(name, [])))

    def fire(self, event: int) -> None:
        self.events[event] = True

    def clear(self, name: str) -> None:
        """The pool as built: every vid free in order, the frontier at the base, no hole, no
        pending page, no forward in flight, no move counted, no free group open (what one
        deferred is dropped: every page is free after the clear), no load-back reservation (its
        pages are free too, and nothing blocks moves). Pending pages are dropped, not made
        holes: after a clear every page above the frontier is free whatever an unfired event
        still reads (the caller flushes a cache only when idle). The KV bytes are left as they
        are (a clear frees pages, it does not wipe them); events keep their state."""
        self.pools[name] = ModelPool(self.pools[name].geo, self.lazy)

    def unfired(self) -> list[int]:
        return sorted(event for event, fired in self.events.items() if not fired)

    def write(self, name: str, vids: list[int], payloads: list[bytes]) -> None:
        """Stamp each vid's page through `translate` (payloads are `epp` bytes each)."""
        for vid, payload in zip(vids, payloads):
            start = self._page_start(name, vid)
            self.kv[start:start + len(payload)] = payload

    def read(self, name: str, vid: int) -> bytes:
        start = self._page_start(name, vid)
        return bytes(self.kv[start:start + self.pools[name].geo.epp])

    def read_live(self, name: str) -> dict[int, bytes]:
        return {vid: self.read(name, vid) for vid, page in enumerate(self.pools[name].v2p[:-1])
                if page > 0}

    def _page_start(self, name: str, vid: int) -> int:
        pool = self.pools[name]
        return max(pool.v2p[vid], 0) * pool.geo.epp  # translate: a tombstone reads the sink

    def snapshot(self, name: str) -> PoolSnapshot:
        pool = self.pools[name]
        event, writes = pool.inflight or (None, [])
        return PoolSnapshot(
            wm=pool.wm, live=pool.live, avail=self.avail(name), num_moves=pool.num_moves,
            holes=tuple(sorted(pool.holes)),
            pending=tuple((e, tuple(sorted(pages))) for e, pages in sorted(pool.pending.items())),
            pending_set=tuple(sorted(pool.pending_set())),
            inflight=() if self.fired(event) else tuple(writes),
            free_vids=tuple(pool.free_vids), v2p=tuple(pool.v2p), p2v=tuple(pool.p2v),
            group=None if pool.group is None else tuple(pool.group),
            reserved=tuple(sorted(pool.reserved_set())), loading=pool.loading)
