"""One END pool of the unified-memory allocator in torch: v2p/p2v tables, lazy free into holes,
and the lazy `flush` (spec §3.5-§3.8) whose only host reads are the sorted-hole snapshot and, when
an unfired forward is in flight, its write set. The commit is one batch (PR 34066).
"""

from __future__ import annotations

import torch

I64 = torch.int64


class SimEvent:
    """Stands in for a CUDA event: `query()` turns True when the harness fires it."""

    def __init__(self, ident: int):
        self.ident, self.fired = ident, False

    def query(self) -> bool:
        return self.fired


class LazyPool:
    """Grows up from page `reserved` or down from `num_pages - 1`; `kv`: its view of the buffer."""

    def __init__(self, name: str, up: bool, num_pages: int, reserved: int, epp: int,
                 lazy: bool, kv: torch.Tensor, move_cap: int):
        self.name, self.up, self.lazy, self.move_cap = name, up, lazy, move_cap
        self.num_pages, self.reserved, self.epp, self.kv = num_pages, reserved, epp, kv
        self.device = kv.device
        self.clear()

    def clear(self) -> None:
        """The pool as built: every page free, nothing pending, reserved or in flight, no free
        group open (what it deferred is free now anyway). The KV rows stay."""
        num_pages = self.num_pages
        self.wm = self.reserved if self.up else num_pages - 1
        self.live = 0
        self.num_moves = 0
        # Row 0 is the padding anchor (vid 0 <-> page 0); the last row a -1 sentinel for gathers.
        self.v2p = torch.full((num_pages + 1,), -1, dtype=I64, device=self.device)
        self.p2v = torch.full((num_pages + 1,), -1, dtype=I64, device=self.device)
        self.v2p[0] = 0
        self.p2v[0] = 0
        self.free_vids = torch.arange(self.reserved, num_pages, dtype=I64, device=self.device)
        self.holes = torch.empty(0, dtype=I64, device=self.device)
        self.pending: dict[SimEvent, tuple[list[int], torch.Tensor]] = {}
        self.pending_pages: set[int] = set()  # host mirror of the pending batches
        self.inflight: tuple[SimEvent, torch.Tensor] | None = None
        self.latest_event: SimEvent | None = None
        self.group: list[torch.Tensor] | None = None  # an open free group's deferred frees
        # HiCache load-back reservations (pages bound to no vid), oldest first, and their page
        # count: while it is above 0 no page moves (the queued copy names their pages).
        self.reservations: list[torch.Tensor] = []
        self.loading = 0

    def to_device(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=I64, device=self.device)

    @property
    def span(self) -> int:
        return self.wm - self.reserved if self.up else self.num_pages - 1 - self.wm

    # --- allocation -----------------------------------------------------------------------

    def take(self, n: int, extension_room: int) -> torch.Tensor | None:
        """Drain holes from the front, extend the frontier for the rest; None changes nothing."""
        drained = min(n, self.holes.numel()) if self.lazy else 0  # numel is metadata: no sync
        need = n - drained
        if need > extension_room:
            return None
        old = self.wm
        if self.up:
            self.wm += need
            extension = torch.arange(old, old + need, dtype=I64, device=self.device)
        else:
            self.wm -= need
            extension = torch.arange(self.wm + 1, old + 1, dtype=I64, device=self.device)
            if drained:  # the mixed slow path emits a down extension descending (§3.1)
                extension = extension.flip(0)
        pages = torch.cat((self.holes[:drained], extension))
        self.holes = self.holes[drained:]
        self.live += n
        return pages

    def release(self, index: int) -> None:
        """Roll back reservation `index`: its pages become holes, in the order taken."""
        pages = self.reservations.pop(index)
        self.loading -= pages.numel()
        self.holes = torch.cat((self.holes, pages))
        self.live -= pages.numel()

    def bind(self, vids: torch.Tensor, pages: torch.Tensor) -> None:
        self.v2p[vids] = pages
        self.p2v[pages] = vids

    def free(self, vids: torch.Tensor) -> None:
        """§3.5: one fused unbind, holes appended unsorted; no sort, no barrier, no host read."""
        pages = self.v2p[vids]
        self.v2p[vids] = -1
        self.p2v[pages] = -1
        self.free_vids = torch.cat((self.free_vids, vids))
        self.holes = torch.cat((self.holes, pages))
        self.live -= vids.numel()

    # --- compaction -----------------------------------------------------------------------

    def drain(self, urgent: bool) -> None:
        """Ready pending batches (all, if urgent) rejoin the holes; wm and live do not change."""
        ready = [event for event in self.pending if urgent or event.query()]
        for event in ready:
            pages, pages_t = self.pending.pop(event)
            self.pending_pages.difference_update(pages)
            self.holes = torch.cat((self.holes, pages_t))

    def flush(self, urgent: bool) -> int:
        """§3.6: one batched compaction pass; returns the number of pages moved."""
        if not self.lazy:
            return 0
        if self.loading:  # moves blocked by a load-back reservation: fired batches only
            self.drain(False)
            return 0
        self.drain(urgent)
        sorted_holes = torch.sort(self.holes).values
        host = sorted_holes.tolist()  # the one snapshot of the hole list
        absorbed = self._absorb(host)
        if self.up:
            self.wm -= absorbed
            interior, self.holes = host[:len(host) - absorbed], sorted_holes[:len(host) - absorbed]
        else:
            self.wm += absorbed
            interior, self.holes = host[absorbed:], sorted_holes[absorbed:]
        latest = self.latest_event
        full_pack = urgent and bool(interior)
        if full_pack:  # settle: a stream wait on the forward, which stays unfired
            self.inflight, latest = None, None
        srcs, dsts = self._walk(interior, urgent)
        released = self.commit(srcs, dsts, latest)
        if full_pack:
            self.wm += -len(interior) if self.up else len(interior)
            self.holes = torch.empty(0, dtype=I64, device=self.device)
        else:
            keep = self.holes[len(srcs):] if self.up else self.holes[:len(interior) - len(srcs)]
            self.holes = keep if released is None else torch.cat((keep, released))
        return len(srcs)

    def _absorb(self, host: list[int]) -> int:
        count, step = 0, -1 if self.up else 1
        edge = self.wm - 1 if self.up else self.wm + 1
        ordered = reversed(host) if self.up else iter(host)
        for page in ordered:
            if page != edge + step * count:
                break
            count += 1
        return count

    def _walk(self, interior: list[int], urgent: bool) -> tuple[list[int], list[int]]:
        """Host ints only: topmost survivor into deepest hole, skipping holes by a merge."""
        srcs, dsts, blocked = [], [], None
        step = -1 if self.up else 1
        end = self.reserved - 1 if self.up else self.num_pages
        page = self.wm - 1 if self.up else self.wm + 1
        hole = len(interior) - 1 if self.up else 0  # merge pointer, moving with `page`
        while len(srcs) < len(interior):
            while page != end:
                while 0 <= hole < len(interior) and (interior[hole] - page) * step < 0:
                    hole += step
                in_holes = 0 <= hole < len(interior) and interior[hole] == page
                if not in_holes and page not in self.pending_pages:
                    break
                page += step
            if page == end:
                break
            if not urgent:
                blocked = self._write_set() if blocked is None else blocked
                if page in blocked:
                    break  # the top blocker halts a non-urgent walk
            dst = interior[len(dsts)] if self.up else interior[len(interior) - 1 - len(dsts)]
            if (page < dst) if self.up else (page > dst):
                break  # crossing: the band is packed
            srcs.append(page)
            dsts.append(dst)
            page += step
            if not urgent and len(srcs) >= self.move_cap:
                break
        return srcs, dsts

    def _write_set(self) -> set[int]:
        """Materialised on first need: one batch-sized host read, only if a forward is unfired."""
        if self.inflight is None or self.inflight[0].query():
            return set()
        return set(self.v2p[self.inflight[1]].clamp_min(0).tolist())

    def commit(self, srcs: list[int], dsts: list[int], latest: SimEvent | None):
        """§3.7 in one batch: one gather of p2v, a device assert, one KV copy, one remap."""
        if not srcs:
            return None
        src_t = self.to_device(srcs)  # host -> device copies: no sync
        dst_t = self.to_device(dsts)
        vids = self.p2v[src_t]
        torch._assert_async((vids >= 0).all(), "invalid p2v mapping in compaction flush")
        self.relocate(src_t, dst_t, vids)
        return self.dispose(srcs, src_t, latest)

    def relocate(self, src_t: torch.Tensor, dst_t: torch.Tensor, vids: torch.Tensor) -> None:
        # Sources and holes are disjoint, so one gather then one scatter is order-free.
        # (index_select/index_copy_, not `kv[d] = kv[s]`: advanced indexing on uint8 rows is
        # ~1000x slower on a busy multi-threaded CPU.)
        self.kv.index_copy_(0, dst_t, self.kv.index_select(0, src_t))
        self.v2p[vids] = dst_t
        self.p2v[dst_t] = vids
        self.p2v.index_fill_(0, src_t, -1)
        self.num_moves += src_t.numel()

    def dispose(self, srcs: list[int], src_t: torch.Tensor, latest: SimEvent | None):
        """Sources an in-flight forward may still read wait under its event; accumulate them."""
        if latest is None or latest.query():
            return src_t
        pages, pages_t = self.pending.get(latest, ([], src_t[:0]))
        self.pending[latest] = (pages + srcs, torch.cat((pages_t, src_t)))
        self.pending_pages.update(srcs)
        return None


class PerPageCommitPool(LazyPool):
    """The commit as it was before PR 34066: one `.item()` host read per moved page."""

    def commit(self, srcs: list[int], dsts: list[int], latest: SimEvent | None):
        if not srcs:
            return None
        vids = []
        for src in srcs:
            vid = int(self.p2v[src].item())
            if vid < 0:
                raise AssertionError(f"invalid p2v mapping in compaction flush: page {src}")
            vids.append(vid)
        src_t = self.to_device(srcs)
        self.relocate(src_t, self.to_device(dsts), self.to_device(vids))
        return self.dispose(srcs, src_t, latest)
