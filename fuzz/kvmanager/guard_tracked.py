"""The kvmanager guard's record of each engine request (`guard.py`): its tokens as the trace has
them, where it stands (running, paused, loading), its steps in flight; a new request checked for
what the trace can hold and made an `arrive` op."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.async_ops import Flights
from kvfuzz.fuzz.kvmanager.guard_request import embedding_values as _embedding_values
from kvfuzz.fuzz.kvmanager.guard_request import extra_keys as _extra_keys
from kvfuzz.strategies.kvmanager.trace import Arrive

MAX_TOKEN = (1 << 31) - 1


class _Tracked(Flights):
    """One request as the trace's ops have moved it (the scheduler must agree)."""

    def __init__(self, rid: int, tokens: list[int], embedded: int = 0, engine=None):
        # `tokens` as the trace has them: a prompt of `embedded` embeddings as their values
        self.rid, self.tokens, self.computed, self.running = rid, tokens, 0, False
        self.engine = engine  # the engine's Request (its status says when it stopped)
        self.paused = False  # stopped, resumable, waiting for its next streaming update
        self.streamed = False  # waiting after a streaming stop, until its next allocation
        self.discarded = None  # the token its last streaming stop discarded, where seen
        # under lookahead hashing: the engine's hashes as checked at its last streaming update
        # (guard_streaming.py), until a lookup makes them again; None: from its first token
        self.hashes = None
        self.embedded = embedded
        self.prompt = len(tokens)  # it arrives with its prompt alone
        self.loading = False  # its asynchronous KV load in flight (a `connect` with `load`)
        self.hit = 0  # the local hit of its last connector admission
        # a synchronous load's (local hit, end, computed tokens after its admission) until the
        # request's next allocation: a failure reported in between rewinds its computed tokens
        self.sync_load = None
        # its computed tokens before its last allocation's step (the engine's, an admission's
        # hit and external tokens): where a failed block it holds sets it back (`cut`)
        self.before = 0
        # its last two allocations' tokens (guard_async.py: what an asynchronous cut sets it back
        # by, the step before the one in flight)
        self.steps: tuple[int, ...] = ()
        # its last allocation's tokens (a pipeline's last few), until a `processed` each
        # (guard_async.py)
        self.flights: list[int] = []
        self.async_sync_end = None  # its synchronous load's end, under asynchronous scheduling
        self.ghost = 0  # its admission's output placeholder left by a failed load (guard_async.py)
        self.owed = 0  # and that of the step then in flight, until its output

    def engine_ids(self) -> list[int]:
        """The token ids the engine's request holds (0 for each embedded position)."""
        return [0] * self.embedded + self.tokens[self.embedded:]


class RequestTracking:
    """Mixed into `GuardedManager` (its requests, session, driver and `_refuse`)."""

    def _request(self, request, arriving: bool = False) -> _Tracked:
        """The request's record; a new one arrives (its `arrive` op) when `arriving`."""
        tracked = self._kvfuzz_requests.get(request.request_id)
        if tracked is not None:
            return tracked
        if not arriving:
            self._refuse(f"request {request.request_id!r} reaches the manager before its "
                         f"get_computed_blocks")
        tokens = [int(t) for t in request.all_token_ids]
        keys = _extra_keys(request)
        embeds = _embedding_values(request)
        if embeds:  # the trace's tokens are then its embedding values (the engine's ids: 0)
            tokens[:len(embeds)] = embeds
        prompt = getattr(request, "prompt_token_ids", tokens) or embeds or ()
        reasons = [name for name, bad in (
            ("a LoRA adapter or cache salt the trace cannot hold", keys is None),
            ("multimodal inputs", bool(getattr(request, "mm_features", None))),
            ("no prefix-cache read", getattr(request, "skip_reading_prefix_cache", False)),
            ("prompt embeddings other than one integral value a position below 2^24, or "
             "mixed with token ids", embeds is None),
            ("output tokens before its admission", len(tokens) != len(prompt)),
            ("token ids outside 0..2^31-1", any(not 0 <= t <= MAX_TOKEN for t in tokens)),
            ("more tokens than max_model_len",
             not 1 <= len(tokens) <= self.kvfuzz_session.header.max_model_len)) if bad]
        if reasons:
            self._refuse(f"request {request.request_id!r} has {', '.join(reasons)}")
        tracked = _Tracked(self._kvfuzz_next_rid, tokens, len(embeds), request)
        vars(self)["_kvfuzz_next_rid"] += 1
        self._kvfuzz_requests[request.request_id] = tracked
        if self._kvfuzz_driver is not None:
            self._kvfuzz_driver.requests[tracked.rid] = request
        self.kvfuzz_session.step(Arrive(tracked.rid, tuple(tokens), embeds=bool(embeds),
                                        **(keys or {})))
        return tracked

    def _same_tokens(self, request, tracked) -> None:
        if list(request.all_token_ids) != tracked.engine_ids():
            self._refuse(f"request {request.request_id!r} has tokens the trace has not seen "
                         f"({request.num_tokens} tokens, the trace {len(tracked.tokens)})")
