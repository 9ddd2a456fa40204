"""The request's lock on a `UnifiedRadixCache` before 0.5.22, as its scheduler kept it: the radix
target's old calls (`impl/radix/legacy.py`), but every lock held with its receipt, and the receipt
handed to the request in the fields those releases read it from.

Before 0.5.20 `dec_lock_ref(node, params=None)` takes the receipt as an option, so the old calls
held a bare node; yet the SWA component locks up from the node only until the window is covered
and marks that node (`swa_uuid_for_lock`), and a release without the mark walks to the root,
dropping locks it never took (0.5.11-0.5.13 then assert `lock_ref > 0`). The scheduler kept the
mark on the request: `req.swa_uuid_for_lock = result.swa_uuid_for_lock` after `inc_lock_ref`
(and `req.skip_lock_node_ids`, 0.5.17-0.5.19, whose `_dec_req_lock` reads both), which the
request calls read and rewrite (`cache_unfinished_req` locks the key's node and sets them); from
0.5.20 on they read and write `req.lock_receipt` instead. The hand-over and the receipt read
back are the radix target's (`LegacyCalls._hand_over`, `_receipt_back`): before 0.5.17, where no
`_dec_req_lock` names the fields, they are the mark's (`MARK_DEFAULTS`)."""

from __future__ import annotations

from kvfuzz.impl.radix.legacy import MARK_DEFAULTS, Held, LegacyCalls


class UnifiedLegacyCalls(LegacyCalls):
    def __init__(self, cache, allocator, rows, receipt_of):
        """`receipt_of(result)`: the `DecLockRefParams` an `inc_lock_ref` result stands for."""
        super().__init__(cache, allocator, rows)
        self.receipts, self.receipt_of = True, receipt_of
        if not self.lock_fields:  # before 0.5.17: the request calls read the mark itself
            self.lock_fields = tuple(MARK_DEFAULTS)

    def lock(self, node):
        return Held(node, self.receipt_of(self.cache.inc_lock_ref(node)))
