"""The reduced Mamba "align" mode's draft steps (`fuzz/kvmanager/align.py`), mixed into
`AlignLockstep`: vLLM's synchronous scheduler with multi-token prediction (the guard's
`MAMBA_MTP` sessions, `guard_sync_drafts.py`) schedules a running request's last token and its
drafts (`schedule` with `drafts`: `sync_draft_ops.py`), and after the step's output rolls the
rejected drafts back before its `cache_blocks` (`settle`). What the reduced mode judges of the
step is what it judges of any chunk (the allocation's counts with the Mamba group's
speculative blocks, the states kept, the pool); the `settle` rolls the request's computed
tokens back and makes the scheduler's `cache_blocks`, whose caching `align_caching_settle.py`
judges (since 2026-12-07)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.strategies.kvmanager.trace import Settle

ROLLED_BACK = "Mamba align: drafts rolled back at a settle"
SHORTER = "Mamba align: a step short of the last draft step's table"
EVENTS = (ROLLED_BACK, SHORTER)


class AlignDrafts:
    """Mixed into `AlignLockstep` (its `align`, `requests`, `count`, `rolled_back`,
    `draft_step`, and `align_async`'s `settle_made`, `settled`)."""

    def align_chunk(self, op, request, pending: int) -> int:
        """A running request's tokens this `schedule` allocates: with drafts the synchronous
        draft step's (its last token and the drafts there is room for), else the chunk's."""
        return self.draft_step(op, request, pending) if op.drafts else min(op.chunk, pending)

    def drafts_allocated(self, rid, end: int) -> None:
        """After a successful allocation to `end` tokens: the table is that step's, but where
        an earlier draft step (its rejected drafts rolled back) reached past `end` (under
        asynchronous scheduling a step without drafts after one with them): vLLM's
        `allocate_new_blocks` then allocates nothing and the table stays the draft step's.
        (A refused step leaves the table as it was, its draft end kept.)"""
        if self.drafted_to.get(rid, 0) <= end:
            self.drafted_to.pop(rid, None)
        else:
            self.count(SHORTER)

    @handles(Settle)
    def settle(self, op: Settle):
        if not self.align:
            return (yield from super().settle(op))
        request = self.requests.get(op.rid)
        end = request and request.computed
        # (under asynchronous scheduling only after a step that sampled: vLLM's
        # `update_from_output` caches for a request with new tokens, and a prefill chunk's
        # refused allocation leaves a checkpoint its `cache_blocks` would trip on:
        # `align_async.py`)
        if request is None or request.status != RUNNING or (
                self.trace.async_scheduling and request.computed < len(request.tokens) - 1) \
                or not self.settle_made(op, request) or not self.rolled_back(op, request):
            return  # (`settle_made`: a settle vLLM's asynchronous scheduler makes, `align_async`)
        self.settled(op.rid, request)
        if op.rejected:
            # vLLM's Mamba table stays as the draft step allocated it, its scratch blocks past
            # the state of the step's last token, until the next step (`align_pool.py`); under
            # asynchronous scheduling the next step may be allocated already, its drafts rolled
            # back at an earlier settle: the table stays that step's, the largest end since
            self.drafted_to[op.rid] = max(end, self.drafted_to.get(op.rid, 0))
            self.count(ROLLED_BACK)
            yield Call("", "set_computed", (op.rid, request.computed, RUNNING), oracle=None)
        # (under asynchronous scheduling what is processed: its tokens in flight left out, as
        # `free_ops.settle` and vLLM's `update_from_output`)
        computed = request.computed - (request.in_flight if self.trace.async_scheduling else 0)
        yield Call(f"cache_blocks(r{op.rid}, {computed}) after its output",
                   "cache_blocks", (op.rid, computed), oracle=None)
