"""The request's lock on a `UnifiedRadixCache` before 0.5.20, as its scheduler kept it: the radix
target's old calls (`impl/radix/legacy.py`), but every lock held with its receipt, and the receipt
handed to the request in the fields those releases read it from.

Before 0.5.20 `dec_lock_ref(node, params=None)` takes the receipt as an option, so the old calls
held a bare node; yet the SWA component locks up from the node only until the window is covered
and marks that node (`swa_uuid_for_lock`), and a release without the mark walks to the root,
dropping locks it never took (0.5.11-0.5.13 then assert `lock_ref > 0`). The scheduler kept the
mark on the request: `req.swa_uuid_for_lock = result.swa_uuid_for_lock` after `inc_lock_ref`
(and `req.skip_lock_node_ids`, 0.5.17-0.5.19, whose `_dec_req_lock` reads both), which the
request calls read and rewrite (`cache_unfinished_req` locks the key's node and sets them); from
0.5.20 on they read and write `req.lock_receipt` instead."""

from __future__ import annotations

import dataclasses

from kvfuzz.impl.radix.legacy import Held, LegacyCalls


class UnifiedLegacyCalls(LegacyCalls):
    def __init__(self, cache, allocator, rows, receipt_of):
        """`receipt_of(result)`: the `DecLockRefParams` an `inc_lock_ref` result stands for."""
        super().__init__(cache, allocator, rows)
        self.receipts, self.receipt_of = True, receipt_of

    def lock(self, node):
        return Held(node, self.receipt_of(self.cache.inc_lock_ref(node)))

    def _hand_over(self, request) -> None:
        super()._hand_over(request)
        if isinstance(request.lock, Held):  # the fields releases before 0.5.20 read
            receipt = request.lock.receipt
            request.swa_uuid_for_lock = getattr(receipt, "swa_uuid_for_lock", None)
            request.skip_lock_node_ids = getattr(receipt, "skip_lock_node_ids", {})

    def checkpoint(self, request, finishing: bool) -> int:
        handed = request.lock.receipt if isinstance(request.lock, Held) else None
        protected = super().checkpoint(request, finishing)
        lock = request.lock
        if not finishing and isinstance(lock, Held) and handed is not None and \
                lock.receipt is handed:
            # the release moved the lock without writing `lock_receipt` (before 0.5.20): the
            # new lock's receipt is in the fields it wrote
            request.lock = Held(lock.node, _rewritten(handed, request))
        return protected


def _rewritten(receipt, request):
    """`receipt` with the mark (and the skipped nodes, where it has them) the release wrote on
    the request."""
    if not dataclasses.is_dataclass(receipt):  # nothing of its fields to rewrite
        return receipt
    fields = {name: getattr(request, name, None) for name in ("swa_uuid_for_lock",
                                                             "skip_lock_node_ids")
              if hasattr(receipt, name)}  # (0.5.20 on name neither: nothing to rewrite)
    if not fields:
        return receipt
    if fields.get("skip_lock_node_ids", {}) is None:
        fields["skip_lock_node_ids"] = {}
    return dataclasses.replace(receipt, **fields)
