"""Broken lazy-compaction allocators the suite must catch (spec §3.7 and the commit remap).

Each is a factory `(params) -> TorchCompaction` over a pool class with one fault.
"""

from __future__ import annotations

from impl.compaction.allocator import TorchCompaction
from impl.compaction.pool import LazyPool


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
        self.kv[dst_t] = self.kv[src_t]
        self.v2p[vids] = dst_t
        self.p2v[dst_t] = vids
        self.num_moves += src_t.numel()


def pending_replaced(params) -> TorchCompaction:
    return TorchCompaction(params, lazy=True, pool_class=_PendingReplacedPool)


def p2v_not_cleared(params) -> TorchCompaction:
    return TorchCompaction(params, lazy=True, pool_class=_P2vNotClearedPool)
