"""The lock step's `cut` op (`connector_ops.Cut`): vLLM's scheduler rewinds a running request's
computed tokens for a failed KV block it holds without a synchronous load of its own there (a
block shared through a prefix hit on another request's failed synchronous load, or its own
load's block that a request before it in the running queue marked first:
`_update_requests_with_invalid_blocks`, "recompute" policy). The manager is not called: the
request's blocks stay, cached, and its next steps compute the tokens again through them, which
every allocation after it judges as any other."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles
from kvfuzz.strategies.kvmanager.connector_ops import Cut

CUT = "computed tokens cut: a failed block held"
CUT_TO_BLOCK = "computed tokens cut to a failed block's start"
EVENTS = (CUT, CUT_TO_BLOCK)


class CutOps:
    """Mixed into `KVManagerLockstep`."""

    @handles(Cut)
    def cut(self, op: Cut):
        request = self.requests.get(op.rid)
        # (under asynchronous scheduling a skipped output leaves placeholders and steps in
        # flight this op does not say yet; with more than one group vLLM's scheduler refuses
        # failed blocks, whose ids are only unique within a group: nothing there, nor in a
        # reduced mode, whose model has no groups)
        if request is None or request.status != "running" or op.to > request.computed or \
                self.trace.async_scheduling or len(getattr(self.model, "sizes", (0, 0))) > 1:
            return
        self.count(CUT)
        if op.to % self.trace.scheduler_block_size == 0 and op.to < request.computed:
            self.count(CUT_TO_BLOCK)
        request.computed, request.sync_load = op.to, None
        yield Call("", "set_computed", (op.rid, op.to, "running"), oracle=None)
