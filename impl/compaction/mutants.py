"""Broken lazy-compaction allocators the suite must catch (spec §3.7: pending batches, the remap
and the KV move of the commit).

Each is a factory `(params) -> TorchCompaction` over a pool class with one fault.
"""

from __future__ import annotations

from kvfuzz.impl.compaction.allocator import TorchCompaction
from kvfuzz.impl.compaction.pool import LazyPool


class _PendingReplacedPool(LazyPool):
    """The bug PR 39982 fixes: a second batch under the same event replaces the first entry,
    while the host set keeps both, so the first batch is never released (a leak)."""

    def dispose(self, srcs, src_t, latest):
        if latest is None or latest.query():
            return src_t
        self.pending[latest] = (list(srcs), src_t)
        self.pending_pages.update(srcs)
        return None


class _P2vNotClearedPool(LazyPool):
    """The commit remaps v2p and p2v of the destinations but leaves p2v of its sources bound."""

    def relocate(self, src_t, dst_t, vids):
        self.kv.index_copy_(0, dst_t, self.kv.index_select(0, src_t))
        self.v2p[vids] = dst_t
        self.p2v[dst_t] = vids
        self.num_moves += src_t.numel()


class _KvNotMovedPool(LazyPool):
    """The commit remaps both tables but never copies the KV rows: moved vids read stale bytes."""

    def relocate(self, src_t, dst_t, vids):
        self.v2p[vids] = dst_t
        self.p2v[dst_t] = vids
        self.p2v.index_fill_(0, src_t, -1)
        self.num_moves += src_t.numel()


class _ClearKeepsPendingPool(LazyPool):
    """`clear()` resets the tables and the frontier but keeps the pages pending on an unfired
    event: once it fires they rejoin the holes, pages the cleared pool also hands out afresh."""

    def clear(self) -> None:
        pending, pages = getattr(self, "pending", {}), getattr(self, "pending_pages", set())
        super().clear()
        self.pending, self.pending_pages = pending, pages


class _ClearKeepsGroupPool(LazyPool):
    """`clear()` resets the pool but keeps its open free group: the frees deferred before the
    clear are freed again at the group's end (vids the cleared pool no longer holds), and the
    frees after it stay deferred where the scheduler's group is gone."""

    def clear(self) -> None:
        group = getattr(self, "group", None)
        super().clear()
        self.group = group


class _ClearKeepsReservationsPool(LazyPool):
    """`clear()` resets the pool but keeps its HiCache load-back reservations: their pages stay
    out of use in the emptied pool (and may lie above its frontier), and no page moves again
    until they are rolled back."""

    def clear(self) -> None:
        held, loading = getattr(self, "reservations", []), getattr(self, "loading", 0)
        super().clear()
        self.reservations, self.loading = held, loading


class _ReserveTokensAsPages(TorchCompaction):
    """A load-back reservation that takes its size in tokens as a count of pages: right at page
    size 1, `page_size` times too many pages above it (SGLang's `alloc_physical` with
    `need_size // page_size` as `* page_size` takes more still)."""

    def reserve(self, name: str, num_tokens: int):
        pages = self.reserve_pages(name, num_tokens)
        return None if pages is None else self._tokens(pages).tolist()


class _FreesPagesAsNamed(TorchCompaction):
    """A free above page size 1 that releases the pages in the order their tokens name them,
    not ascending as the released class's `torch.unique` does: the holes and the free list
    come out in another order (which page the next allocation gets back)."""

    def free_tensor(self, name: str, tokens) -> None:
        pool = self.pools[name]
        if self.page_size == 1 or pool.group is not None:
            return super().free_tensor(name, tokens)
        pool.free(pool.to_device(list(dict.fromkeys((tokens // self.page_size).tolist()))))


def pending_replaced(params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=True, pool_class=_PendingReplacedPool, device=device)


def p2v_not_cleared(params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=True, pool_class=_P2vNotClearedPool, device=device)


def kv_not_moved(params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=True, pool_class=_KvNotMovedPool, device=device)


def clear_keeps_pending(params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=True, pool_class=_ClearKeepsPendingPool, device=device)


def clear_keeps_group(params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=True, pool_class=_ClearKeepsGroupPool, device=device)


def clear_keeps_reservations(params, device: str = "cpu") -> TorchCompaction:
    return TorchCompaction(params, lazy=True, pool_class=_ClearKeepsReservationsPool,
                           device=device)


def reserve_tokens_as_pages(params, device: str = "cpu") -> TorchCompaction:
    return _ReserveTokensAsPages(params, lazy=True, device=device)


def frees_pages_as_named(params, device: str = "cpu") -> TorchCompaction:
    return _FreesPagesAsNamed(params, lazy=True, device=device)
