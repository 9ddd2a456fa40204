"""The lock step's `cut` op (`connector_ops.Cut`): vLLM's scheduler rewinds a running request's
computed tokens for a failed KV block it holds without a synchronous load of its own there (a
block shared through a prefix hit on another request's failed synchronous load, or its own
load's block that a request before it in the running queue marked first:
`_update_requests_with_invalid_blocks`, "recompute" policy). The manager is not called: the
request's blocks stay, cached, and its next steps compute the tokens again through them, which
every allocation after it judges as any other.

Under asynchronous scheduling (since 2026-12-06) the failure comes with a step's output while
the request's next step may be in flight: vLLM sets `num_computed_tokens` (which counts that
step) to the op's `to`, keeps the step in flight counted, and skips the request's output of
the failed step (`update_from_output`'s `failed_kv_load_req_ids`). The op applies beneath the
request's steps in flight (the failed step's output, where the request had a step there,
already processed: a `processed` before the op where that step was its last): `skip_output`
keeps the placeholders vLLM leaves, as for a failed synchronous load's `loaded`
(`connector.py`, which calls it too)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles
from kvfuzz.strategies.kvmanager.connector_ops import Cut

CUT = "computed tokens cut: a failed block held"
CUT_TO_BLOCK = "computed tokens cut to a failed block's start"
# under asynchronous scheduling: the cut with a step of the request in flight, which stays so;
# and the skipped step's output placeholder left unresolved (it sampled)
CUT_IN_FLIGHT = "computed tokens cut beneath a step in flight"
CUT_GHOST = "computed tokens cut: the skipped step's output placeholder left"
# under the V2 runner's pipeline (`steps_in_flight` 2; since 2026-12-06)
CUT_PIPELINED = "computed tokens cut under a pipeline"
ASYNC_EVENTS = (CUT_IN_FLIGHT, CUT_GHOST, CUT_PIPELINED)
EVENTS = (CUT, CUT_TO_BLOCK) + ASYNC_EVENTS


def skip_output(request) -> int:
    """A failed block's cut under asynchronous scheduling, before the computed tokens are set:
    vLLM skipped the request's output of the step that reported it, so where that step sampled
    its output placeholder is never resolved (`ghost`: the scheduler schedules one position
    more past the tokens from then on), and the step still in flight beneath the cut samples
    where it reaches past the tokens and those placeholders (`owed`: its `sample` then comes
    over fewer computed tokens than the tokens). `request` is the lock step's or the guard's
    (its computed tokens counting its steps in flight, `in_flight` theirs, the skipped step's
    sampled token not among its tokens). Returns the placeholders left (0 or 1)."""
    past = len(request.tokens) + request.ghost  # where a step's output is a sampled token
    left = int(request.computed - request.in_flight >= past)
    request.ghost += left
    request.owed = int(bool(request.in_flight) and request.computed >= past + left)
    return left


class CutOps:
    """Mixed into `KVManagerLockstep`."""

    @handles(Cut)
    def cut(self, op: Cut):
        request = self.requests.get(op.rid)
        # (with more than one group vLLM's scheduler refuses failed blocks, whose ids are only
        # unique within a group: nothing there, nor in a reduced mode, whose model has no
        # groups)
        if request is None or request.status != "running" or op.to > request.computed or \
                len(getattr(self.model, "sizes", (0, 0))) > 1:
            return
        self.count(CUT)
        if op.to % self.trace.scheduler_block_size == 0 and op.to < request.computed:
            self.count(CUT_TO_BLOCK)
        if self.trace.async_scheduling:
            if request.in_flight:
                self.count(CUT_IN_FLIGHT)
            if self.trace.steps_in_flight > 1:
                self.count(CUT_PIPELINED)
            if skip_output(request):
                self.count(CUT_GHOST)
        request.computed, request.sync_load = op.to, None
        yield Call("", "set_computed", (op.rid, op.to, "running"), oracle=None)
