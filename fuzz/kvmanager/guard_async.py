"""The manager's guard under vLLM's asynchronous scheduler (`AsyncScheduler`: step N+1
scheduled before step N's output is processed), mixed into `GuardedManager` (`guard.py`): told
so (`kvfuzz.guard(..., async_scheduling=True)`; the trace's `async_scheduling`), or, by default
(None: `kvfuzz guard kvmanager -- COMMAND`, whose settings are the manager's constructor
keywords), inferred at the first allocation of a running request with tokens in flight, where
no running request's allocation was judged before (admissions alone are the same call either
way, so the trace's setting, set then, reads the same from its start). What the scheduler then
passes the manager, and the trace's op for it:

- a request's tokens in flight (`num_in_flight_tokens`: scheduled, output not processed) at
  each allocation: its previous allocation's, as the trace's asynchronous mode holds them, or
  none once that step's output is processed: a `processed` op first; under a pipeline
  (`kvfuzz.guard(..., steps_in_flight=n)`, the trace's `steps_in_flight`: vLLM's V2 model
  runner over n stages) its last n allocations', a `processed` for each oldest one the engine
  processed;
- `allocate_slots(request, 1)` of a running request whose tokens are all computed (its output
  placeholder, `num_output_placeholders`: the token its step in flight samples, not yet
  appended): `placeholder`;
- `cache_blocks(request, computed - in flight)` after each output that sampled (the scheduler
  makes it whenever the request has output placeholders): `settle`, after the `sample` of the
  token, the trace caching the computed tokens less those in flight;
- a preempted request's token delivered by its step in flight after the preemption (its
  "stale output"), seen at its next lookup: a `sample` with `stale`.

With speculative decoding (`AsyncScheduler` adds `1 + k` output placeholders a step that
samples, the k drafts placeholders the worker fills in): `allocate_slots(request, 1 + k)` of a
running request whose tokens are all computed, past them the drafts of its step in flight:
`placeholder` with `drafts` k; the output's accepted drafts and bonus token: a `sample` each
(before the `settle`, or with `stale` after a preemption); the drafts it rejected (and tokens
a stop trimmed), which vLLM rolls back from `num_computed_tokens` before its `cache_blocks`:
the `settle`'s `rejected`, the lock step then caching its own count of processed tokens,
judged against the engine's.

Refused (`GuardUnsupported`): tokens in flight where the guard was told the scheduler is
synchronous (`async_scheduling=False`) or, inferring, after a running request's allocation
was judged as a synchronous scheduler's; other in-flight counts than those above (more steps
in flight than the guard was told), a waiting
request with tokens in flight (but one waiting after a streaming stop, whose step in flight
is dropped: `guard_streaming.py`), a `cache_blocks` of other than the processed tokens, a rollback
past the request's tokens, more tokens an output than one a draft more than one; under a KV
connector, with draft tokens a running request cut below its synchronous load's end where a
step of it samples (`_drafted`), and a failed block's cut outside vLLM's rule (a failed
block's cut otherwise: `loaded` for its own synchronous load, `cut` for one it holds else,
beneath its steps in flight, under a pipeline two included: `_async_sync_cut`,
`_async_cut`). A padded admission (`pad_spec_decode`) is a `schedule` with `pad` and
`rows_in_flight`: its rows counted computed and in flight until its output's `settle` rolls
them back; so is a padded resumption after a KV load, and a padded connector admission is a
`connect` with `pad` and `rows_in_flight` (`guard_connector.py`). A KV connector's loads need
nothing more here: an asynchronous load's
admission and its report carry no tokens in flight (`guard_connector.py` maps them).
"""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.async_ops import flown
from kvfuzz.fuzz.kvmanager.cut import skip_output
from kvfuzz.strategies.kvmanager.codec import MAX_PAD as MAX_DRAFTS
from kvfuzz.strategies.kvmanager.connector_ops import Cut, Loaded
from kvfuzz.strategies.kvmanager.trace import Processed, Sample

MAX_TOKEN = (1 << 31) - 1


class AsyncCalls:
    """Mixed into `GuardedManager` (its session, requests, `_refuse`, `_run`, `_sampled`)."""

    def _asynchronous(self) -> bool:
        return self.kvfuzz_session.header.async_scheduling

    def _in_flight(self, tracked, request, output: bool = False) -> None:
        """Before an allocation or a post-output `cache_blocks`: the request's tokens in flight
        as the trace has them, after a `processed` op where the step's output came (`output`:
        a post-output `cache_blocks`, that output's step processed after any failed block's
        cut, which came with an older step's output)."""
        cut = self._async_sync_cut(tracked, request)
        actual = int(getattr(request, "num_in_flight_tokens", 0) or 0)
        name = request.request_id
        if not self._asynchronous():
            state = vars(self)
            if not actual:
                state["_kvfuzz_synchronous_steps"] = state.get(
                    "_kvfuzz_synchronous_steps", 0) + tracked.running
                return
            if not (state.get("_kvfuzz_infer_async") and tracked.running and
                    not state.get("_kvfuzz_synchronous_steps")):
                self._refuse(f"request {name!r} has {actual} tokens in flight (an asynchronous "
                             f"scheduler: kvfuzz.guard(..., async_scheduling=True) from the "
                             f"first call maps it)")
            self.kvfuzz_session.set_header(async_scheduling=True)  # inferred
        # (a waiting request's tokens in flight: a streaming stop's step, its output dropped)
        if not tracked.running and not getattr(tracked, "streamed", False):
            if actual:
                self._refuse(f"request {name!r} waits with {actual} tokens in flight")
            return
        # the engine processes a request's steps oldest first: what it has in flight is the
        # trace's newest ones (its previous allocation's, or a pipeline's last few) or none
        left = [sum(tracked.flights[i:]) for i in range(len(tracked.flights) + 1)]
        if actual not in left:
            steps = self.kvfuzz_session.header.steps_in_flight
            self._refuse(f"request {name!r} has {actual} tokens in flight where the trace has "
                         f"{tracked.in_flight} (its last {steps} allocations', oldest "
                         f"processed first: {tracked.flights}) or fewer: more steps in flight "
                         f"than kvfuzz.guard(..., steps_in_flight={steps}) maps")
        if cut and output:  # (the output that came is of the step beneath the cut)
            # under a pipeline, the older steps processed first: the failed one among them
            # (`_async_cut` reads its tokens from `steps`)
            keep = len(tracked.flights) - left.index(actual) + 1
            while len(tracked.flights) > keep:
                self.kvfuzz_session.step(Processed(tracked.rid))
                tracked.flights.pop(0)
            self._async_cut(tracked, request)
        while tracked.in_flight != actual:  # each oldest step's output came
            self.kvfuzz_session.step(Processed(tracked.rid))
            tracked.flights.pop(0)
        if cut and not output:  # (the step processed, if any, is the one the failure came with)
            self._async_cut(tracked, request)

    def _flown(self, tracked, tokens: int) -> None:
        """After an allocation of `tokens`: the request's steps in flight, as the lock step
        keeps them (`async_ops.flown`: a pipeline's last few, else that one); its last two
        steps' tokens (`steps`: what a failed block's cut sets it back by, `_async_cut`)."""
        if tokens:  # (under a pipeline one more: the failed step beneath two in flight)
            kept = self.kvfuzz_session.header.steps_in_flight
            tracked.steps = (*tracked.steps[len(tracked.steps) - kept:], tokens)
        tracked.flights = flown(tracked.flights, tokens,
                                self.kvfuzz_session.header.steps_in_flight)

    def _async_sync_cut(self, tracked, request) -> None:
        """A running request's computed tokens cut below the end of its synchronous KV load (a
        block of it failed, "recompute" policy). Under asynchronous scheduling the failure comes
        with the admission step's output, usually after the request's next step was scheduled:
        vLLM cuts `num_computed_tokens` to the failed block with that step still counted in
        flight, and skips the output (`_update_requests_with_invalid_blocks`,
        `update_from_output`): `loaded(rid, n)`, which the lock step applies beneath the step
        in flight (`connector.py`), the admission's output placeholder left unresolved where
        it sampled (`ghost`). Where nothing of the request was allocated since its admission,
        that step's output is processed first (`processed`), as in the synchronous sessions.
        With draft tokens the same where neither the skipped step nor the step in flight
        samples (prefill chunks: vLLM's state is the one without drafts); refused where one
        does (`_drafted`)."""
        load = tracked.async_sync_end
        n = int(request.num_computed_tokens)
        if load is None or not tracked.running or n >= load[1]:
            # (a failed block it holds with no synchronous load of its own there: `cut`,
            # written by `_async_cut` once the steps processed are known; with draft tokens a
            # rollback of the rejected ones)
            return tracked.running and n < tracked.computed and not self._drafts() and \
                self._asynchronous() and not getattr(tracked, "streamed", False)
        hit, end, after, rows = load
        size = self.kvfuzz_session.header.block_size
        beneath = tracked.in_flight and tracked.computed - tracked.in_flight == after and \
            tracked.computed > after
        drafted = self._drafted(tracked, rows)
        if not self._drafts() and (n % size or n < hit // size * size) and \
                (beneath or tracked.computed == after):
            return True  # (its own block, marked first by a request before it: `cut`)
        tracked.async_sync_end = None
        # under a pipeline the trace may hold the admission step S among its steps in flight:
        # the failure came with S's output, processed first (`processed`), the cut then
        # beneath the steps after it (vLLM 0.33.0's V2 runner, session 2: S+1 alone there)
        actual = int(getattr(request, "num_in_flight_tokens", 0) or 0)
        while len(tracked.flights) > 1 and tracked.computed - tracked.in_flight < after and \
                tracked.in_flight - tracked.flights[0] >= actual:
            self.kvfuzz_session.step(Processed(tracked.rid))
            tracked.flights.pop(0)
            beneath = tracked.in_flight and tracked.computed - tracked.in_flight == after and \
                tracked.computed > after
        if len(tracked.flights) > 1 and not beneath:
            self._refuse(f"request {request.request_id!r} cut below its synchronous KV load's "
                         f"end {end} with {len(tracked.flights)} steps in flight (a pipeline's)"
                         f": not mapped")
        if drafted or n % size or \
                not hit // size * size <= n < end or \
                not (beneath or tracked.computed == after):
            why = f"with draft tokens ({drafted}) " if drafted else ""
            self._refuse(f"request {request.request_id!r} cut to {n} computed tokens below its "
                         f"synchronous KV load's end {end} (its hit {hit}, {after} computed "
                         f"after its admission, the trace {tracked.computed} with "
                         f"{tracked.in_flight} in flight; asynchronous scheduling): not mapped "
                         f"{why}yet")
        if not beneath and tracked.in_flight:  # its admission's output processed
            if request.num_in_flight_tokens:
                self._refuse(f"request {request.request_id!r} cut below its synchronous load "
                             f"with {request.num_in_flight_tokens} tokens in flight")
            self.kvfuzz_session.step(Processed(tracked.rid))
            tracked.in_flight = 0
        self.kvfuzz_session.step(Loaded(tracked.rid, n))  # no call: nothing made
        # vLLM skipped the admission step's output: where it sampled, its placeholder stays;
        # the step in flight samples (its output then resolves its placeholder)
        skip_output(tracked)
        tracked.computed, tracked.sync_load = n, None
        return False

    def _drafted(self, tracked, rows: int) -> str:
        """Why a failed synchronous load's cut with draft tokens is not mapped ("" where it
        is: no step of the request, the skipped one or the one in flight, reaches its
        tokens' end, so none samples and vLLM's state is the one without drafts). Where one
        does, vLLM (0.33.0, `replace(ASYNC_CONNECTOR, sync_load_failures=True,
        speculative="eagle", num_speculative=2)`, sessions 2 and 22; docs/upstream-vllm.md,
        "with draft tokens") has set the request's draft placeholders (`spec_token_ids`),
        which the recompute's chunk then schedules past its placeholder (`1 + k` positions
        past the tokens, not one); a padded admission's skipped output leaves its `1 + k`
        placeholders; and a draft step in flight rolls its rejected drafts back from
        `num_computed_tokens`, which by then counts the recompute's chunk (its
        `cache_blocks` below the cut). None of that is the trace's `loaded` yet."""
        if not self._drafts() or tracked.computed < len(tracked.tokens):
            return ""
        if rows:
            return f"the skipped admission step's {rows} padded draft rows"
        return "a step of it sampled, its draft placeholders set"

    def _async_cut(self, tracked, request) -> None:
        """A running request's computed tokens cut for a failed block it holds with no
        synchronous load of its own there (one shared through a prefix hit, or its own load's
        that a request before it marked first): vLLM (`_update_requests_with_invalid_blocks`)
        sets them, counting its step in flight, to the failed block's start where it is the
        first in the running queue to hold it, else back by the tokens of the step whose
        output reported it (its computed tokens less `num_scheduled_tokens`; nothing where it
        was not in that step), keeps the step in flight counted and skips its output of that
        step: `cut(rid, n)` beneath the steps the engine still has in flight, which
        `cut.skip_output` leaves the placeholders of as vLLM does (under a pipeline beneath its
        steps in flight, two included: vLLM 0.33.0's V2 runner, session 263). Refused: any
        other rewind."""
        n, size = int(request.num_computed_tokens), self.kvfuzz_session.header.block_size
        steps = tracked.steps
        # the step the failure came with: the one before those in flight (under a pipeline up
        # to two), or the last processed
        beneath = len(tracked.flights)
        failed = steps[-1 - beneath] if len(steps) > beneath else 0
        if n % size and n != tracked.computed - failed:
            self._refuse(f"request {request.request_id!r} rewound to {n} computed tokens from "
                         f"{tracked.computed} ({tracked.flights} in flight, its last steps "
                         f"{steps}): neither a block's start nor its computed tokens less the "
                         f"failed step's, beneath its steps in flight (asynchronous "
                         f"scheduling)")
        self.kvfuzz_session.step(Cut(tracked.rid, n))  # no call: nothing made
        skip_output(tracked)
        tracked.computed, tracked.sync_load, tracked.async_sync_end = n, None, None

    def _drafts(self) -> bool:
        """Whether the scheduler has draft tokens (their slots asked at every allocation)."""
        return bool(self.kvfuzz_session.header.lookahead)

    def _engine_in_flight(self, request) -> int:
        """The tokens in flight the lock step must pass with a running request's allocation:
        the engine's (none where the scheduler is synchronous: `_in_flight` refused any)."""
        return int(getattr(request, "num_in_flight_tokens", 0) or 0) \
            if self._asynchronous() else 0

    def _placeholder(self, tracked, request, n: int, tokens: list, seen: list) -> bool:
        """Whether an allocation of a running request is its output placeholder's slot, and,
        with speculative decoding, its `n - 1` drafts' (the trace's `drafts`): its tokens all
        computed, past them at most the drafts of its step in flight; or, with drafts, a
        decode of its last token with nothing in flight (it sat out a step: no placeholders
        left, its draft placeholders still there)."""
        if not (self._asynchronous() and 1 <= n <= 1 + MAX_DRAFTS and tokens == seen and
                tracked.computed + n < self.kvfuzz_session.header.max_model_len):
            return False
        if tracked.computed >= len(tracked.tokens):
            return int(getattr(request, "num_output_placeholders", 0) or 0) > 0
        return n > 1 and tracked.computed == len(tracked.tokens) - 1 and \
            not request.num_in_flight_tokens and \
            len(getattr(request, "spec_token_ids", ()) or ()) >= n - 1

    def _async_settle(self, tracked, request, n: int):
        """The scheduler's `cache_blocks(request, computed - in flight)` after an output: a
        `settle`, after the `sample`s of the tokens it appended (with speculative decoding the
        accepted drafts and the bonus token), with the drafts it rejected rolled back."""
        self._in_flight(tracked, request, output=True)
        owed = tracked.owed  # the output of the step in flight at a failed load's cut
        self._sampled(tracked, request)
        actual = request.num_computed_tokens - int(request.num_in_flight_tokens or 0)
        if actual != n:
            self._refuse(f"cache_blocks of {n} tokens of running request "
                         f"{request.request_id!r}, which has {actual} processed")
        rejected = self._rejected(tracked, request)
        if not (0 <= rejected <= min(MAX_DRAFTS, tracked.computed + 1 - len(tracked.tokens)) or
                owed and not rejected):  # (its token, over the cut's fewer computed ones)
            self._refuse(f"request {request.request_id!r} has {request.num_computed_tokens} "
                         f"computed tokens after its output, the trace {tracked.computed} "
                         f"with {len(tracked.tokens)} tokens (a rollback of {rejected})")
        tracked.computed -= rejected
        # (the lock step rolls back as many and caches what is then processed: its own count,
        # judged against the engine's `n`)
        return self._run_settle(tracked, request, n, rejected)

    def _drafts_sampled(self, tracked, tokens: list) -> bool:
        """Whether the request's `tokens` past the trace's are an output of a step with drafts
        (its accepted drafts and the bonus token, at most one a draft more than one), each
        over positions the request counts computed, drafts in flight included (what the lock
        step's `sample` needs): every token but the last."""
        # (synchronous: a `schedule` with drafts counts them computed past the tokens)
        return (self._asynchronous() or tracked.computed > len(tracked.tokens)) and \
            len(tokens) - len(tracked.tokens) <= 1 + MAX_DRAFTS and \
            len(tokens) - 1 <= tracked.computed

    def _rows_in_flight(self, pad: int) -> bool:
        """Whether a padded admission's rows (`pad_spec_decode`) stay counted computed and in
        flight until the step's output, whose `settle` rolls them back as rejected drafts:
        under asynchronous scheduling, as `_update_after_schedule` counts them (the trace's
        `rows_in_flight`)."""
        return bool(pad) and self._asynchronous()

    def _rejected(self, tracked, request) -> int:
        """The drafts the output rejected, and the tokens a stop trimmed (vLLM rolls both back
        from `num_computed_tokens` before the call): what the request counts computed less
        what the engine's request now does."""
        return tracked.computed - request.num_computed_tokens

    def _stale(self, tracked, request) -> None:
        """A preempted request's tokens that its step in flight delivered after the
        preemption (one, or with speculative decoding up to one a draft more), seen at its
        next lookup: a `sample` with `stale` each."""
        tokens, seen = list(request.all_token_ids), tracked.engine_ids()
        if not self._asynchronous() or tracked.running or tracked.computed or \
                not getattr(request, "num_preemptions", 0) or \
                not len(seen) < len(tokens) <= len(seen) + 1 + MAX_DRAFTS or \
                tokens[:len(seen)] != seen:
            return
        for token in tokens[len(seen):]:
            if not 0 <= token <= MAX_TOKEN or \
                    len(tokens) > self.kvfuzz_session.header.max_model_len:
                self._refuse(f"request {request.request_id!r}'s stale token {token} at "
                             f"{len(tokens)} tokens")
            tracked.tokens.append(token)
            self.kvfuzz_session.step(Sample(tracked.rid, token, stale=True))
