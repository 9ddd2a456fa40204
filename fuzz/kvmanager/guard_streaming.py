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
update's; its prompt is all of them; its block hashes what the release's rule gives
(`_stale_hash`).

Under vLLM's asynchronous scheduler the output's `cache_blocks` before the stop has the trace
`sample` the token the stop discards, and the request's next step may be in flight with that
token's slot: the `stream` then has `discard` (the trace's last token dropped, the frontier
the engine's computed tokens), and the step in flight stays counted while the request waits
(its output is dropped; a `processed` of the waiting request once it is, `guard_async.py`).

Under speculative decoding the scheduler's `cache_blocks` after every output has the trace
`sample` the token a stop discards under a synchronous scheduler too: `discard` again. With
lookahead hashing vLLM keeps a block hash that covers the discarded token (its lookahead read
it) until a lookup after a preemption makes the hashes again (scheduler.py 1111): the trace's
rule (`streaming.py`) keeps it too, and the update's hashes are checked against that rule.

Under asynchronous scheduling with drafts the step in flight at a stop holds `1 + k` slots
(the discarded token's and k placeholder drafts'), all dropped with it.

An update of no tokens (which the release's front end never sends, and whose resumption its
scheduler asserts against: `_update_checked`) is written as the stop that waits it is to the
manager, `stream` of no tokens. Refused by name: prompt embeddings (the release refuses them
with streaming input), multimodal inputs in an update (as at an arrival: no multimodal model
here; the trace's `stream` has `images`, which kvfuzz's own traces make), hashes other than the
release's rule gives.
"""

from __future__ import annotations

import copy

from kvfuzz.fuzz.kvmanager.guard_async import MAX_DRAFTS
from kvfuzz.strategies.kvmanager.stream_ops import Stream
from kvfuzz.strategies.kvmanager.trace import Sample

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
        if update and tracked.paused and list(request.all_token_ids) == tracked.engine_ids():
            return  # an update of no tokens taken while it waited: it waits on (`_update_checked`)
        if tracked.embedded:
            # (the release never makes one: its front end refuses prompt embeddings with
            # streaming input, async_llm.py 664, and a `StreamingUpdate` carries none, request.py
            # 41, so an update would leave the embeddings short of the tokens)
            self._refuse(f"resumable (streaming-input) request {name!r} stopped under a "
                         f"prompt given as embeddings, which vLLM refuses with streaming input")
        # Under asynchronous scheduling the stop's discarded token may be the trace's last (the
        # output's `cache_blocks` sampled it first), its slot the step in flight's: `discard`;
        # under speculative decoding (draft slots) that caching comes after every output, so
        # a synchronous scheduler's stop discards the trace's last token too.
        discard = (self._asynchronous() or bool(header.lookahead)) and tracked.running and \
            request.num_computed_tokens == len(tracked.tokens) - 1 <= tracked.computed
        # or a preempted request's stale output stopped it: it has nothing computed (and
        # then, if it waited, its update came)
        stale = not tracked.running and not tracked.computed
        if stale and (not self._asynchronous() or request.num_computed_tokens or
                      tracked.computed or tracked.streamed):
            self._refuse(f"resumable request {name!r} stopped while waiting with "
                         f"{request.num_computed_tokens} computed tokens")
        # (under asynchronous scheduling with drafts its step in flight holds 1 + k slots: the
        # discarded token's and k placeholder drafts', counted computed in the trace)
        drafts = header.lookahead if self._asynchronous() else 0
        if not stale and (request.num_computed_tokens != len(tracked.tokens) - discard or
                          not -drafts <= len(tracked.tokens) - tracked.computed <= discard):
            self._refuse(f"resumable request {name!r} stopped with {request.num_computed_tokens}"
                         f" computed tokens, the trace {tracked.computed} of "
                         f"{len(tracked.tokens)}")
        tokens, seen = list(request.all_token_ids), tracked.engine_ids()[:len(
            tracked.tokens) - discard]
        if tokens[:len(seen)] != seen:
            self._refuse(f"resumable request {name!r} stopped with tokens the trace has not "
                         f"seen before its last")
        if stale and not update and tokens[:len(seen)] == seen and \
                len(seen) + 1 < len(tokens) <= len(seen) + 1 + MAX_DRAFTS:
            # its stale output had accepted drafts before the token the stop discards: those
            # appended after the preemption, a stale `sample` each (an update instead takes
            # them into its prompt tokens, `new`, as the scheduler does: no slot either way)
            for token in tokens[len(seen):-1]:
                if not 0 <= token <= MAX_TOKEN or len(tokens) > header.max_model_len:
                    self._refuse(f"request {name!r}'s stale token {token} at {len(tokens)}")
                tracked.tokens.append(token)
                self.kvfuzz_session.step(Sample(tracked.rid, token, stale=True))
            seen = tracked.engine_ids()
        new = tokens[len(seen):] if update else []
        # the token the stop discards, where known (the trace's last, or the waiting engine
        # request's): an update's hashes are checked against the release's rule with it
        if discard:
            tracked.discarded = tracked.tokens[-1]
        elif not update:
            tracked.discarded = tokens[-1] if len(tokens) > len(seen) else None
        elif not tracked.paused:
            tracked.discarded = None
        if not update and len(tokens) != len(seen) + 1:
            self._refuse(f"resumable request {name!r} waits for an update with {len(tokens)} "
                         f"tokens, the trace {len(seen)} and the one it sampled")
        if update:
            self._update_checked(tracked, request, new, len(seen))
        if discard:
            tracked.tokens.pop()
            tracked.computed = len(tracked.tokens)
        tracked.tokens += new
        # (an update of no tokens leaves it waiting, as a stop with none queued: `paused`)
        tracked.prompt, tracked.running, tracked.paused = len(tracked.tokens), False, not new
        tracked.streamed = tracked.computed > 0  # (it holds blocks: resumed with no lookup)
        self.kvfuzz_session.step(Stream(tracked.rid, tuple(new), discard))

    def _update_checked(self, tracked, request, new: list[int], kept: int) -> None:
        name, most = request.request_id, self.kvfuzz_session.header.max_model_len
        # An update of no tokens is taken (`_update_request_as_session`: the last sampled token
        # discarded, nothing appended, the request WAITING with every token computed), and the
        # scheduler's next step fails `assert num_new_tokens > 0` at its resumption
        # (scheduler.py 1347, both schedulers); the release's front end never sends one (every
        # chunk passes `_validate_prompt_len`: "The decoder prompt cannot be empty",
        # input_processor.py 566). To the manager it is a stop that waits: nothing is asked of
        # it until then, or until an abort frees it. Written as `stream` of no tokens.
        # (multimodal inputs are refused as at an arrival, `guard.py`: the scheduler schedules
        # an image's tokens only with a multimodal model's encoder, which these CPU sessions do
        # not load; the trace says an update's images, `Stream.images`, which kvfuzz's own
        # traces make and the replay driver runs)
        reasons = [reason for reason, bad in (
            ("multimodal inputs", bool(getattr(request, "mm_features", None))),
            ("token ids outside 0..2^31-1", any(not 0 <= t <= MAX_TOKEN for t in new)),
            (f"more tokens than max_model_len {most}", kept + len(new) > most),
            ("a prompt other than all its tokens",
             request.num_prompt_tokens != kept + len(new))) if bad]
        if reasons:
            self._refuse(f"streaming update of request {name!r} with {', '.join(reasons)}")
        header = self.kvfuzz_session.header
        discarded, stale = tracked.discarded, None
        if header.hash_lookahead and discarded is None and tracked.computed:
            self._refuse(f"streaming update of request {name!r} under lookahead hashing, the "
                         f"token its stop discarded unseen")
        # (a request stopped by its stale output, which the trace never had, holds no blocks:
        # its hashes are made again before its lookup, and before that nothing reads them)
        if not (header.hash_lookahead and discarded is None):
            stale = _stale_hash(request, kept, discarded, header.hash_size, tracked.hashes)
        # (the next update's hashes extend these: a kept hash stays in the chain until a
        # lookup makes them again, `_lookup`)
        tracked.hashes = list(request.block_hashes) if header.hash_lookahead else None
        if stale is not None:
            self._refuse(f"streaming update of request {name!r}: its block hash {stale} is not "
                         f"its tokens' (the discarded token's block kept its hash?)")


def _stale_hash(request, kept: int, discarded: int | None, size: int,
                chain: list | None = None) -> int | None:
    """The first of the engine's block hashes of `request`, after a streaming update, that the
    release's rule does not give (None: all agree), made with its own hasher: the request's
    `kept` tokens and the `discarded` one hashed (as they were at its stop), the hashes of
    blocks from the one the discarded token was in cut (`_update_request_as_session`), then
    extended over its tokens now. Without lookahead hashing that is its tokens' hashes from the
    start; with it, a hash covering the discarded token is kept (its lookahead read it), and
    the hashes go on from `chain` (the request's at its last update, since its last lookup:
    None, from its first token), which may hold one kept so before. The
    trace's hashes follow the same rule, and the live driver pairs the engine's with them by
    position, so a hash vLLM failed to cut would pass for the right one: it is checked here."""
    hasher = getattr(request, "_block_hasher", None)
    if hasher is None:
        return None
    fresh = copy.copy(request)  # (shares nothing it changes: its tokens and hashes replaced)
    tokens = list(request.all_token_ids)
    fresh.block_hashes = list(chain or ())
    if discarded is not None:
        fresh._all_token_ids = fresh.all_token_ids = tokens[:kept] + [discarded]
        fresh.block_hashes = (fresh.block_hashes + hasher(fresh))[:kept // size]
    fresh._all_token_ids = fresh.all_token_ids = tokens
    expected, actual = fresh.block_hashes + hasher(fresh), list(request.block_hashes)
    for index, (want, got) in enumerate(zip(expected, actual)):
        if want != got:
            return index
    return None if len(expected) == len(actual) else min(len(expected), len(actual))
