"""The guard's mapping of vLLM's resumable (streaming-input) requests onto the trace's `stream`
op (`strategies/kvmanager/stream_ops.py`), mixed into `GuardedManager`.

The scheduler calls nothing on the manager when a resumable request stops or takes its next
update (`_handle_stopped_request`, `_update_request_as_session`): the guard finds such a
request before each call it models, by its status, and writes what happened to it since. A
request the trace has running whose engine request is now `WAITING_FOR_STREAMING_REQ` stopped
and waits (a `stream` of no tokens; the engine's request still holds the token it sampled
last, which the update discards); one now `WAITING`, resumable, with tokens past the trace's,
took an update (a `stream` of the new tokens). Checked as it is written: the request keeps its
computed tokens, every token the trace has; the engine's tokens are the trace's and the
update's; its prompt is all of them; its block hashes are its tokens' (`_stale_hash`).

Under vLLM's asynchronous scheduler the output's `cache_blocks` before the stop has the trace
`sample` the token the stop discards, and the request's next step may be in flight with that
token's slot: the `stream` then has `discard` (the trace's last token dropped, the frontier
the engine's computed tokens), and the step in flight stays counted while the request waits
(its output is dropped; a `processed` of the waiting request once it is, `guard_async.py`).

Refused by name: draft tokens, lookahead hashing (vLLM keeps a block hash that covers the
discarded token until a re-admission recomputes it, scheduler.py 1111), prompt embeddings,
multimodal inputs in an update, an update of no tokens, hashes that are not the tokens'.
"""

from __future__ import annotations

import copy

from kvfuzz.strategies.kvmanager.stream_ops import Stream

MAX_TOKEN = (1 << 31) - 1


class StreamingCalls:
    """Mixed into `GuardedManager` (its requests, session and `_refuse`)."""

    def _streams(self) -> None:
        """Every resumable request that stopped, or took an update, since the guard's last
        call: its `stream`, before the call's own op."""
        for tracked in self._kvfuzz_requests.values():
            request = tracked.engine
            status = getattr(getattr(request, "status", None), "name", "")
            if status == "WAITING_FOR_STREAMING_REQ" and tracked.running:
                self._stopped(tracked, request, update=False)
            elif status == "WAITING" and getattr(request, "resumable", False) and \
                    (tracked.running or tracked.paused):
                # (a preempted request is freed first, and is PREEMPTED: only a stop leaves a
                # request the trace has running waiting without a call)
                self._stopped(tracked, request, update=True)
            elif status in ("WAITING", "WAITING_FOR_STREAMING_REQ") and \
                    getattr(request, "resumable", False) and not tracked.running and \
                    not tracked.paused and getattr(request, "num_preemptions", 0) and \
                    list(request.all_token_ids) != tracked.engine_ids():
                # a preempted request (PREEMPTED until then) stopped by its stale output
                self._stopped(tracked, request, update=status == "WAITING")

    def _stopped(self, tracked, request, update: bool) -> None:
        header, name = self.kvfuzz_session.header, request.request_id
        for reason, bad in (("draft tokens", header.lookahead),
                            ("lookahead hashing", header.hash_lookahead),
                            ("a prompt given as embeddings", tracked.embedded)):
            if bad:
                self._refuse(f"resumable (streaming-input) request {name!r} stopped under "
                             f"{reason}: not mapped yet")
        # Under asynchronous scheduling the stop's discarded token may be the trace's last (the
        # output's `cache_blocks` sampled it first), its slot the step in flight's: `discard`.
        discard = self._asynchronous() and tracked.running and \
            request.num_computed_tokens == len(tracked.tokens) - 1 <= tracked.computed
        # or a preempted request's stale output stopped it: it has nothing computed (and
        # then, if it waited, its update came)
        stale = not tracked.running and not tracked.computed
        if stale and (not self._asynchronous() or request.num_computed_tokens or
                      tracked.computed or tracked.streamed):
            self._refuse(f"resumable request {name!r} stopped while waiting with "
                         f"{request.num_computed_tokens} computed tokens")
        if not stale and (request.num_computed_tokens != len(tracked.tokens) - discard or
                          not 0 <= len(tracked.tokens) - tracked.computed <= discard):
            self._refuse(f"resumable request {name!r} stopped with {request.num_computed_tokens}"
                         f" computed tokens, the trace {tracked.computed} of "
                         f"{len(tracked.tokens)}")
        tokens, seen = list(request.all_token_ids), tracked.engine_ids()[:len(
            tracked.tokens) - discard]
        if tokens[:len(seen)] != seen:
            self._refuse(f"resumable request {name!r} stopped with tokens the trace has not "
                         f"seen before its last")
        new = tokens[len(seen):] if update else []
        if not update and len(tokens) != len(seen) + 1:
            self._refuse(f"resumable request {name!r} waits for an update with {len(tokens)} "
                         f"tokens, the trace {len(seen)} and the one it sampled")
        if update:
            self._update_checked(tracked, request, new, len(seen))
        if discard:
            tracked.tokens.pop()
            tracked.computed = len(tracked.tokens)
        tracked.tokens += new
        tracked.prompt, tracked.running, tracked.paused = len(tracked.tokens), False, not update
        tracked.streamed = tracked.computed > 0  # (it holds blocks: resumed with no lookup)
        self.kvfuzz_session.step(Stream(tracked.rid, tuple(new), discard))

    def _update_checked(self, tracked, request, new: list[int], kept: int) -> None:
        name, most = request.request_id, self.kvfuzz_session.header.max_model_len
        reasons = [reason for reason, bad in (
            ("no tokens", not new),
            ("multimodal inputs", bool(getattr(request, "mm_features", None))),
            ("token ids outside 0..2^31-1", any(not 0 <= t <= MAX_TOKEN for t in new)),
            (f"more tokens than max_model_len {most}", kept + len(new) > most),
            ("a prompt other than all its tokens",
             request.num_prompt_tokens != kept + len(new))) if bad]
        if reasons:
            self._refuse(f"streaming update of request {name!r} with {', '.join(reasons)}")
        stale = _stale_hash(request)
        if stale is not None:
            self._refuse(f"streaming update of request {name!r}: its block hash {stale} is not "
                         f"its tokens' (the discarded token's block kept its hash?)")


def _stale_hash(request) -> int | None:
    """The first of the engine's block hashes of `request` that its own hasher, run over its
    tokens from the start, does not give (None: all agree). The trace's hashes run over the
    tokens, and the live driver pairs the engine's with them by position, so a hash vLLM
    failed to cut at an update would pass for the right one: it is checked here."""
    hasher = getattr(request, "_block_hasher", None)
    if hasher is None:
        return None
    fresh = copy.copy(request)  # (shares the tokens; the hashes list its own)
    fresh.block_hashes = []
    expected, actual = hasher(fresh), list(request.block_hashes)
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want != got:
            return index
    return None if len(expected) == len(actual) else min(len(expected), len(actual))
