"""The two-ended allocator over one shared buffer, and its plain-value facade: every method takes
and returns Python ints and lists, so a harness drives it exactly like the oracle. Tensors stay
inside; host copies for the caller happen after the call, never inside the code under test.

Page size (`params.page_size`, tokens per page): the pools are page-granular; `alloc`, `free`
and `reserve` take and return tokens, as SGLang's `MultiEndedAllocator` does (at page size 1 a
token is its page): `alloc(name, num_tokens)` returns the tokens of the vids bound, page by
page; `free(name, tokens)` frees the distinct pages the tokens fall in, ascending above page
size 1; `reserve(name, num_tokens)` returns the reserved pages' physical slots. `avail`, the
snapshot, `write`, `read_*` and `forward` speak pages (vids).
"""

from __future__ import annotations

import torch

from kvfuzz.impl.compaction.eager import eager_free
from kvfuzz.impl.compaction.kv import SharedKV
from kvfuzz.impl.compaction.pool import LazyPool, PerPageCommitPool, SimEvent
from kvfuzz.strategies.compaction.trace import Params, PoolSnapshot


class TorchCompaction:
    """`lazy`: holes and flush, else compaction at free time. `pool_class` picks the commit."""

    def __init__(self, params: Params, lazy: bool = True, pool_class: type = LazyPool,
                 device: str = "cpu"):
        self.params, self.lazy = params, lazy
        self.page_size = params.page_size
        self.kv = SharedKV(params.total_bytes, device)
        self.pools: dict[str, LazyPool] = {}
        for name, up, epp in (("up", True, params.epp_up), ("down", False, params.epp_down)):
            if name in params.pools():
                num_pages = params.total_bytes // epp
                self.pools[name] = pool_class(
                    name, up, num_pages, -(-params.sink_bytes // epp), epp, lazy,
                    self.kv.pool_view(num_pages, epp), params.move_cap)
        self.events: dict[int, SimEvent] = {}

    def _neighbour(self, name: str) -> LazyPool | None:
        return self.pools.get("down" if name == "up" else "up")

    def _gap_pages(self, name: str) -> int:
        pool, other = self.pools[name], self._neighbour(name)
        if pool.up:
            limit = (other.wm + 1) * other.epp if other else self.params.total_bytes
            return max(0, limit - pool.wm * pool.epp) // pool.epp
        limit = other.wm * other.epp if other else 0
        return max(0, (pool.wm + 1) * pool.epp - limit) // pool.epp

    def _extension_room(self, name: str) -> int:
        pool = self.pools[name]
        return min(self._gap_pages(name), pool.num_pages - pool.reserved - pool.span)

    def avail(self, name: str) -> int:
        pool = self.pools[name]
        return self._extension_room(name) + (pool.holes.numel() if self.lazy else 0)

    def alloc_tensor(self, name: str, n: int) -> torch.Tensor | None:
        """Fresh vids, or None; short of room, urgently flush the neighbour first (§3.9)."""
        pool, other = self.pools[name], self._neighbour(name)
        if n > self.avail(name) and other is not None:
            other.flush(urgent=True)
        if n > self.avail(name) or n > pool.free_vids.numel():
            return None
        vids, pool.free_vids = pool.free_vids[:n], pool.free_vids[n:]
        pages = pool.take(n, self._extension_room(name))
        if pages is None:
            pool.free_vids = torch.cat((vids, pool.free_vids))  # back at the front
            return None
        pool.bind(vids, pages)
        return vids

    def reserve_pages(self, name: str, n: int) -> torch.Tensor | None:
        """A HiCache load-back reservation (lazy): `n` pages taken as an allocation takes them
        (the same ladder), bound to no vid; None: nothing taken."""
        pool, other = self.pools[name], self._neighbour(name)
        if n > self.avail(name) and other is not None:
            other.flush(urgent=True)
        pages = pool.take(n, self._extension_room(name)) if n <= self.avail(name) else None
        if pages is None:
            return None
        pool.reservations.append(pages)
        pool.loading += n
        return pages

    def reserve(self, name: str, num_tokens: int) -> list[int] | None:
        """The reserved pages' physical slots (`alloc_physical`)."""
        pages = self.reserve_pages(name, num_tokens // self.page_size)
        return None if pages is None else self._tokens(pages).tolist()

    def release(self, name: str, which: str) -> None:
        """Roll back the oldest or newest reservation (its pages become holes)."""
        self.pools[name].release(0 if which == "oldest" else -1)

    def free_tensor(self, name: str, tokens: torch.Tensor) -> None:
        pool = self.pools[name]
        if pool.group is not None:  # deferred: a copy, so the caller may reuse its tensor
            pool.group.append(tokens.clone())
            return
        # A token is its page at page size 1 (callers pass distinct ids); above, the distinct
        # pages the tokens fall in, ascending.
        vids = tokens if self.page_size == 1 else torch.unique(tokens // self.page_size)
        if self.lazy:
            pool.free(vids)
        else:
            eager_free(pool, vids)

    # --- the plain-value facade -----------------------------------------------------------

    def _tokens(self, pages: torch.Tensor) -> torch.Tensor:
        """Every token of each page, page by page: `page * page_size + offset`."""
        if self.page_size == 1:
            return pages
        offsets = torch.arange(self.page_size, dtype=pages.dtype, device=pages.device)
        return (pages[:, None] * self.page_size + offsets).reshape(-1)

    def alloc(self, name: str, num_tokens: int) -> list[int] | None:
        vids = self.alloc_tensor(name, num_tokens // self.page_size)
        return None if vids is None else self._tokens(vids).tolist()

    def free(self, name: str, tokens: list[int]) -> None:
        self.free_tensor(name, self.pools[name].to_device(tokens))

    def flush(self, name: str, urgent: bool) -> int:
        return self.pools[name].flush(urgent)

    def drain(self, name: str, urgent: bool) -> None:
        if self.lazy:
            self.pools[name].drain(urgent)

    def forward(self, event: int, writes: dict[str, list[int]]) -> None:
        self.events[event] = SimEvent(event)
        for name, pool in self.pools.items():
            pool.latest_event = self.events[event]
            pool.inflight = (self.events[event], pool.to_device(writes.get(name, [])))

    def fire(self, event: int) -> None:
        self.events[event].fired = True

    def clear(self, name: str) -> None:
        self.pools[name].clear()

    def free_group_begin(self, name: str) -> None:
        """Frees of this pool are deferred to `free_group_end` (the scheduler's one free per
        step); groups do not nest (SGLang asserts so, and so do we, changing nothing)."""
        pool = self.pools[name]
        if pool.group is not None:
            raise AssertionError("free groups cannot be nested")
        pool.group = []

    def free_group_end(self, name: str) -> None:
        pool = self.pools[name]
        deferred, pool.group = pool.group, None
        if deferred:
            self.free_tensor(name, torch.cat(deferred))

    def write(self, name: str, vids: list[int], payloads: list[bytes]) -> None:
        pool = self.pools[name]
        pages = pool.v2p[pool.to_device(vids)].clamp_min(0)  # translate
        self.kv.write(pool.kv, pages, payloads)

    def read_live(self, name: str) -> dict[int, bytes]:
        pool = self.pools[name]
        rows = self.kv.read_all(pool.kv)
        return {vid: rows[page] for vid, page in enumerate(pool.v2p[:-1].tolist()) if page > 0}

    def snapshot(self, name: str) -> PoolSnapshot:
        pool = self.pools[name]
        event, writes = pool.inflight or (None, None)
        pending = sorted((e.ident, tuple(sorted(pages))) for e, (pages, _) in pool.pending.items())
        return PoolSnapshot(
            wm=pool.wm, live=pool.live, avail=self.avail(name), num_moves=pool.num_moves,
            holes=tuple(sorted(pool.holes.tolist())), pending=tuple(pending),
            pending_set=tuple(sorted(pool.pending_pages)),
            inflight=() if event is None or event.query() else tuple(writes.tolist()),
            free_vids=tuple(pool.free_vids.tolist()), v2p=tuple(pool.v2p.tolist()),
            p2v=tuple(pool.p2v.tolist()),
            group=None if pool.group is None else self._group_vids(pool.group),
            reserved=tuple(sorted(torch.cat(pool.reservations).tolist()
                                  if pool.reservations else ())),
            loading=pool.loading)

    def _group_vids(self, group: list[torch.Tensor]) -> tuple[int, ...]:
        """The vids an open group's deferred frees name, each once, in the order named."""
        tokens = torch.cat(group).tolist() if group else []
        return tuple(dict.fromkeys(token // self.page_size for token in tokens))


# The catalogue's factories (kvfuzz.impl.compaction): `factory(params, device) -> TorchCompaction`.
def lazy(params: Params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=True, device=device)


def eager(params: Params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=False, device=device)


def before(params: Params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=True, device=device, pool_class=PerPageCommitPool)
