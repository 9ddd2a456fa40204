"""The KV-cache-manager judge's synchronous draft step, mixed into `KVManagerLockstep`: vLLM
0.33.0's synchronous `Scheduler` with speculative decoding schedules a running request whose
last sampled token is its only uncomputed one that token and its `spec_token_ids`, `1 + k`
tokens (`scheduler.py` 839-852: `num_tokens_with_spec - num_computed_tokens`, capped by the
budget and by `max_model_len - num_computed_tokens - 1`), with nothing in flight; the request
counts the drafts computed past its tokens until the step's output, which appends the accepted
ones and the bonus token (`sample`s) and rolls the rejected ones back before its
`cache_blocks` (`settle` with `rejected`, `async_ops.AsyncOps.rolled_back`, the same rule as
the asynchronous scheduler's): the trace's `schedule` with `drafts`."""

from __future__ import annotations

# the lock step's edge classes of it (kvfuzz's "sync drafts" profile and the guard's
# synchronous speculative sessions make them)
STEP = "synchronous step with draft tokens"
PAST_BLOCK = "synchronous draft slots past a block's end"
CAPPED = "synchronous drafts fewer than k at max_model_len"
EVENTS = (STEP, PAST_BLOCK, CAPPED)


class SyncDraftOps:
    """Mixed into `KVManagerLockstep` (its trace and `count`)."""

    def draft_step(self, op, request, pending: int) -> int:
        """The tokens a running request's `schedule` allocates: with `drafts` (synchronous
        scheduling, its last token alone uncomputed) that token and the drafts the chunk and
        `max_model_len` leave room for; else the chunk's tokens of what is pending, as before
        (past it, a failed synchronous load's placeholders: `connector.py`)."""
        if not op.drafts or self.trace.async_scheduling or pending != 1 or \
                request.ghost or request.owed:
            return min(op.chunk, pending + request.ghost + request.owed)
        # the scheduler keeps the token sampled after the drafts within max_model_len
        room = self.trace.max_model_len - request.computed - 2
        drafts = max(0, min(op.drafts, op.chunk - 1, room))
        if drafts == max(0, room) < self.trace.lookahead:  # (here, or by the op's own count)
            self.count(CAPPED)
        if drafts:
            self.count(STEP)
            size = self.trace.block_size
            if request.computed // size != (request.computed + drafts) // size:
                self.count(PAST_BLOCK)
        return min(op.chunk, 1 + drafts)
