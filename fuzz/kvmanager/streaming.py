"""The KV-cache-manager judge's handler of the `stream` op (vLLM's resumable, streaming-input
requests: `strategies/kvmanager/stream_ops.py`), mixed into `KVManagerLockstep`.

The manager sees no call at a resumable request's stop nor at its update: what changes is the
request the scheduler hands it next. It keeps its blocks and computed tokens (the token it
sampled last is discarded, and the trace never had it: no slot was asked for it), it waits
(the watermark and the whole-request check hold at its next allocation, and it no longer
counts as running for another request's), its prompt is every token it has, and its block
hashes run over its tokens as they now are (vLLM cuts them where the discarded token began and
extends them: what hashing the request's tokens from the start gives, without lookahead
hashing; with it a hash covering the discarded token stays, where the trace had that token,
`discard`, until a lookup makes the request's hashes again: `lockstep._Request.rehash`). Its
next allocation is the lock step's resumption (`schedule` of a waiting request
with computed tokens: no lookup), as after a KV load.
"""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.fuzz.engine.lockstep import Call, handles
from kvfuzz.strategies.kvmanager.stream_ops import Stream

# Under the asynchronous scheduler (the guard's `ASYNC_STREAMING` recordings, and since
# 2026-12-06 the "async streaming" profile): a stop's dropped step processed while the request
# waits (`async_ops.py`), and a resumption before it was (its tokens in flight passed)
DROPPED_PROCESSED = "streaming: a waiting request's dropped step processed"
RESUMED_IN_FLIGHT = "streaming: resumed with its dropped step in flight"
ASYNC_EVENTS = ("streaming: the sampled token discarded (its step in flight)",
                "streaming: a preempted request stopped by its stale output",
                DROPPED_PROCESSED, RESUMED_IN_FLIGHT)
# Under speculative decoding (the guard's recordings with draft tokens): the scheduler's caching
# after each output sampled the token the stop discards (a `stream` with `discard`, synchronous
# scheduling too); under lookahead hashing the hash covering it kept until the next lookup
SAMPLED_DISCARDED = "streaming: the sampled token discarded (cached after its output)"
HASH_KEPT = "streaming: a hash covering the discarded token kept"
REHASHED = "streaming: hashes made again at a lookup (lookahead hashing)"
SPEC_EVENTS = (SAMPLED_DISCARDED, HASH_KEPT, REHASHED)
# An update's multimodal inputs (`Stream.images`): their keys on the new blocks' hashes
UPDATE_IMAGES = "streaming: update with images"
EVENTS = ("streaming: stopped, waiting for an update", "streaming: update taken",
          "streaming: update taken at the stop", "streaming: update into a partial block",
          "resumed after a streaming update", *ASYNC_EVENTS, *SPEC_EVENTS, UPDATE_IMAGES)


class StreamingOps:
    """Mixed into `KVManagerLockstep` (its requests and trace)."""

    @handles(Stream)
    def stream(self, op: Stream):
        request = self.requests.get(op.rid)
        # (`discard` drops a sampled token: none where the request's last token is its
        # prompt's, as a trace whose hit estimate was wrong can have it; the replay driver
        # would pop an output the request does not have)
        if request is None or request.keys.embeds or (op.images and not op.tokens) or (
                op.discard and not (
                (self.trace.async_scheduling or self.trace.lookahead) and
                len(request.tokens) > request.prompt)):
            return
        # (with `discard` the token's slot computed or not: its step in flight, or none)
        # (asynchronous with drafts: k placeholder drafts' slots in flight past it too)
        drafts = self.trace.lookahead if self.trace.async_scheduling and op.discard else 0
        running = request.status == "running" and \
            -drafts <= len(request.tokens) - request.computed <= op.discard
        paused = request.status == "waiting" and request.paused and not op.discard
        # asynchronous scheduling: a preempted request stopped by its stale output (the token
        # it delivered is the one discarded, never in the trace): it waits with no blocks
        stale = self.trace.async_scheduling and request.status == "waiting" and \
            request.preempted and not (request.computed or request.paused or
                                       request.streamed or op.discard)
        if not (running or paused or stale) or len(request.tokens) - op.discard < 1 or \
                len(request.tokens) - op.discard + len(op.tokens) > self.trace.max_model_len:
            return
        if op.discard:  # the token its step in flight was computing: dropped, the step stale
            self.count("streaming: the sampled token discarded (its step in flight)"
                       if self.trace.async_scheduling else SAMPLED_DISCARDED)
            ahead, size = self.trace.hash_lookahead, self.trace.hash_size
            if ahead:  # vLLM hashed the blocks its lookahead reached as the token came, and
                # its cut below keeps them: the last may cover the discarded token
                hashed = len(request.hashes(size, ahead))
                if hashed and hashed * size + ahead == len(request.tokens):
                    self.count(HASH_KEPT)
            request.tokens.pop()
            request.computed = len(request.tokens)
            request.drop_hashes_past(self.trace.hash_size)
            yield Call("", "set_computed", (op.rid, request.computed, "running"), oracle=None)
        if stale:
            self.count("streaming: a preempted request stopped by its stale output")
        if not op.tokens:
            self.count("streaming: stopped, waiting for an update")
        else:
            self.count("streaming: update taken" if paused else
                       "streaming: update taken at the stop")
            if len(request.tokens) % self.trace.hash_size:
                self.count("streaming: update into a partial block")
        if op.images:  # placed after the request's tokens, as the scheduler shifts them
            base = len(request.tokens)
            request.keys = replace(request.keys, images=request.keys.images + tuple(
                (ident, base + offset, length) for ident, offset, length in op.images))
            self.model.request_keys[op.rid] = request.keys  # (its KV events read them)
            self.count(UPDATE_IMAGES)
        request.tokens += op.tokens
        request.prompt, request.status = len(request.tokens), "waiting"
        request.paused, request.streamed = not op.tokens, True
        request.rehash = bool(self.trace.hash_lookahead)  # (its next lookup: `_hashes`)
        yield Call(f"r{op.rid} {'waits for a streaming update' if not op.tokens else ''}"
                   f"{f'takes {len(op.tokens)} streamed tokens' if op.tokens else ''}",
                   "stream", (op.rid, op.tokens, *((op.discard,) if op.discard or op.images
                                                    else ()), *((op.images,) if op.images else ())),
                   oracle=None)
