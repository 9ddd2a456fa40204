"""The manager's guard under vLLM's synchronous scheduler with draft tokens, mixed into
`GuardedManager` (`guard.py`): vLLM 0.33.0's `Scheduler` schedules a running request whose last
sampled token is its only uncomputed one that token and its `spec_token_ids` (`scheduler.py`
839-852, 1010-1025), with nothing in flight, and after the step's output rolls the rejected
drafts back (2352-2364) before its `cache_blocks(request, num_computed_tokens)` (2405-2415):

- `allocate_slots(request, n)`, `n - 1` drafts of its `spec_token_ids` (the budget may take
  fewer): `schedule(rid, n, drafts=n - 1)` (`fuzz/kvmanager/sync_draft_ops.py`);
- the output's accepted drafts and bonus token: a `sample` each (`_sampled`, over the drafts
  the trace counts computed);
- the drafts it rejected and the tokens a stop trimmed, which vLLM rolled back: the `settle`'s
  `rejected`, the lock step caching its own count, judged against the engine's.

Other synchronous steps with drafts (from a token not the last, past the trace's caps) stay
refused by name (`guard.py` `_step`)."""

from __future__ import annotations

from kvfuzz.strategies.kvmanager.codec import MAX_PAD as MAX_DRAFTS


class SyncDraftCalls:
    """Mixed into `GuardedManager` (its session, `_refuse`, `_sampled`, `_rejected`,
    `_run_settle`, `_asynchronous`, `_async_settle`)."""

    def _sync_drafts(self, tracked, request, n: int, tokens: list, seen: list) -> bool:
        """Whether an allocation of a running request is the synchronous scheduler's step of
        its last token and `n - 1` drafts (its `spec_token_ids`, of which the budget may take
        fewer): that token alone uncomputed, nothing in flight, the token sampled after the
        drafts within max_model_len (the trace's `schedule` with `drafts`)."""
        drafts = len(getattr(request, "spec_token_ids", ()) or ())
        return not self._asynchronous() and tokens == seen and 2 <= n <= 1 + min(
            drafts, MAX_DRAFTS) and tracked.computed == len(tracked.tokens) - 1 and \
            not tracked.ghost and not tracked.owed and \
            tracked.computed + n + 1 <= self.kvfuzz_session.header.max_model_len

    def _settle(self, tracked, request, n: int):
        """The scheduler's `cache_blocks(request, computed)` after a running request's output
        (with draft tokens): a `settle`, after the `sample`s of the tokens it appended, with
        the drafts it rejected rolled back (none without a draft step: then `n` is the
        trace's)."""
        if self._asynchronous():
            return self._async_settle(tracked, request, n)
        vars(self)["_kvfuzz_synchronous_steps"] = 1  # judged as a synchronous scheduler's
        if request.num_computed_tokens != n:
            self._refuse(f"cache_blocks of {n} tokens of running request "
                         f"{request.request_id!r}, which has {request.num_computed_tokens} "
                         f"computed (the trace {tracked.computed})")
        self._sampled(tracked, request)
        rejected = self._rejected(tracked, request)
        if not 0 <= rejected <= min(MAX_DRAFTS, tracked.computed + 1 - len(tracked.tokens)):
            self._refuse(f"cache_blocks of {n} tokens of running request "
                         f"{request.request_id!r}, which has {request.num_computed_tokens} "
                         f"computed (the trace {tracked.computed}, {len(tracked.tokens)} tokens)")
        tracked.computed -= rejected
        return self._run_settle(tracked, request, n, rejected)
