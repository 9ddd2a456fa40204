"""The kvmanager lock step's frees and the calls around them (a mixin of `KVManagerLockstep`):
a preemption or a finish (`free`, or `pop_blocks_for_free` where deferred), a deferred free's
release, `remove_skipped_blocks` before a connector's `request_finished`, the `cache_blocks` that
settles an output under asynchronous scheduling, evictions and resets."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, crash_problems, handles, short
from kvfuzz.fuzz.kvmanager import connector
from kvfuzz.fuzz.kvmanager.flight_finish import processed_at_finish
from kvfuzz.fuzz.kvmanager.hit_compare import ignored, popped_compare
from kvfuzz.fuzz.kvmanager.lock_request import RUNNING, WAITING
from kvfuzz.strategies.kvmanager.trace import (Evict, Finish, Preempt, Release, RemoveSkipped,
                                               Reset, Settle)

# a `preempt` with `refused` that applied: the request's own refused allocation preempted it
PREEMPTED_BY_REFUSAL = "preempted by its own refused allocation"


class FreeOps:
    """Its `requests`, `model`, `trace`, `count`, `_hashes`, `_counted` and `rolled_back` are
    `KVManagerLockstep`'s."""

    @handles(Preempt, Finish)
    def free(self, op):
        request = self.requests.get(op.rid)
        finish = isinstance(op, Finish)
        if request is None or (not finish and request.status != RUNNING) or \
                not self.refusal_preempts(op, request):
            return
        self.count("finish" if finish else "preempt")
        self.preemptions += not finish
        if op.defer:  # the free deferred: the tables emptied, the blocks still held
            self.count("free deferred (pop_blocks_for_free)")
            if request.status == connector.LOADING:
                self.count("free deferred during its KV load")
            yield Call(f"pop_blocks_for_free(r{op.rid}){'' if finish else ': preempted'}",
                       "pop_blocks_for_free", (op.rid, finish),
                       oracle=lambda: self.model.pop_blocks_for_free(op.rid),
                       compare=popped_compare)
        else:
            yield Call(f"free(r{op.rid}){'' if finish else ': preempted'}", "free",
                       (op.rid, finish), oracle=lambda: self.model.free(op.rid))
        request.sync_load = None
        if finish:
            del self.requests[op.rid]
            yield Call("", "forget", (op.rid,), oracle=None, compare=ignored)
        else:
            request.computed, request.status, request.preempted = 0, WAITING, True
            request.in_flight = 0  # its stale output drained before it is admitted again
            request.ghost = request.owed = 0  # (a preemption clears the output placeholders)
            yield Call("", "set_computed", (op.rid, 0, "preempted"), oracle=None)

    def refusal_preempts(self, op, request) -> bool:
        """Whether a `preempt` with `refused` applies: its request's last allocation refused
        (vLLM's running loop preempts it then); True for every other preemption or finish."""
        if not getattr(op, "refused", False):
            return True
        if request.refused is None:
            return False
        self.count(PREEMPTED_BY_REFUSAL)
        return True

    @handles(Release)
    def release(self, op: Release):
        if not self.model.deferring(op.rid):
            return
        self.count("deferred free released")
        yield Call(f"block_pool.free_blocks(reversed(r{op.rid}'s popped blocks))", "release",
                   (op.rid,), oracle=lambda: self.model.release(op.rid))

    @handles(RemoveSkipped)
    def remove_skipped(self, op: RemoveSkipped):
        request = self.requests.get(op.rid)
        if request is None:
            return
        processed = processed_at_finish(self, op, request)  # (`flight_finish.py`)
        self.count("skipped blocks removed before request_finished")
        yield Call(f"remove_skipped_blocks(r{op.rid}, {processed})", "remove_skipped_blocks",
                   (op.rid, processed),
                   oracle=lambda: self.model.remove_skipped_blocks(op.rid, processed))

    @handles(Settle)
    def settle(self, op: Settle):
        request = self.requests.get(op.rid)
        if request is None or request.status != RUNNING or not self.rolled_back(op, request):
            return
        # (no edge class of its own: the guard's recordings make it, and kvfuzz's "async drafts"
        # and "streaming drafts" profiles, whose REACHES name what follows from it)
        # Under asynchronous scheduling the scheduler caches what is processed: its computed
        # tokens less those in flight (`update_from_output`), rejected drafts rolled back first.
        if op.rejected:
            yield Call("", "set_computed", (op.rid, request.computed, RUNNING), oracle=None)
        rid, hashes = op.rid, self._hashes(request)
        computed = request.computed - (request.in_flight if self.trace.async_scheduling else 0)
        yield Call(f"cache_blocks(r{rid}, {computed}) after its output", "cache_blocks",
                   (rid, computed),
                   oracle=lambda: self.model.cache_blocks(rid, hashes, computed, request.tokens,
                                                          request.prompt, request.boundary))

    @handles(Evict)
    def evict(self, op: Evict):
        ids = sorted({b for b in op.block_ids if b < self.trace.blocks})
        yield self._counted(f"evict_blocks({set(ids) or '{}'})", "evict_blocks", (ids,), "evict")

    @handles(Reset)
    def reset(self, op: Reset):
        def compare(expected, rejected, actual, raised):
            if raised is not None:
                return crash_problems(raised)
            return [] if actual == expected else [("result", f"reset_prefix_cache: expected "
                                                             f"{expected}, actual {short(actual)}")]
        yield self._counted("reset_prefix_cache()", "reset_prefix_cache", (), "reset", compare)
