"""The kvmanager guard's mapping of an allocation (`guard.py`'s `GuardedManager` mixes it in):
an admission (its lookup's hit, the whole-request check and the watermark's other requests,
padded placeholder drafts), a running request's step (a decode, a prefill chunk, a placeholder
of a token in flight, the synchronous scheduler's draft step), each as the trace's op with the
arguments the lock step must pass; and the tokens a request sampled without asking a slot."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.guard_tracked import MAX_TOKEN
from kvfuzz.fuzz.kvmanager.padding import padding
from kvfuzz.strategies.kvmanager.trace import Decode, Placeholder, Sample, Schedule


class AllocationMapping:
    """Mixed into `GuardedManager` (its records, session, `_refuse` and the other mixins'
    `_placeholder`, `_sync_drafts`, `_connector_admission`, `_engine_in_flight`)."""

    # -- mapping -----------------------------------------------------------------------------
    def _admission(self, tracked, request, n, given, lookup, connector):
        if lookup is None:
            self._refuse(f"allocate_slots admits request {request.request_id!r} without a "
                         f"get_computed_blocks just before it")
        blocks, hit, via_connector, cap = lookup
        if given.get("new_computed_blocks") is not blocks or \
                int(given.get("num_new_computed_tokens", 0)) != hit:
            self._refuse(f"allocate_slots admits request {request.request_id!r} with a hit other "
                         f"than its lookup's ({hit} tokens)")
        self._same_tokens(request, tracked)
        whole = self._waiting_allocation(tracked, given)
        if via_connector or connector["num_external_computed_tokens"] or \
                connector["delay_cache_blocks"]:
            # (the engine's external tokens are what `cap_external_hit` left under the cap)
            return self._connector_admission(tracked, n, hit, whole, connector, cap)
        left = len(tracked.tokens) - hit
        pad = padding(self.kvfuzz_session.header, n, left, hit, align=True)
        if not 1 <= n - pad <= left:
            self._refuse(f"allocate_slots admits {n} new tokens of a request with "
                         f"{left} left after its hit")

        def expected(args):
            if tuple(args[1:5]) != (n, hit, True, whole):
                return f"the lock step admits with {args}, the engine with {(n, hit, whole)}"
        # the placeholders are rejected drafts once the step's output is processed: the
        # request's computed tokens are then its own (what its `settle` checks); under
        # asynchronous scheduling counted computed and in flight until then (guard_async.py)
        held = self._rows_in_flight(pad)
        capped = {"max_hit": cap} if cap >= 0 else {}  # (where the scheduler passed one)
        return Schedule(tracked.rid, n, pad, rows_in_flight=held, **capped), expected, \
            self._runs(tracked, hit + n - (0 if held else pad))

    def _caller_cap(self, method: str, tracked, max_hit) -> int:
        """A lookup's `max_cache_hit_length` (vLLM's scheduler passes one with auxiliary
        outputs on: `vllm_aux.py`) as the trace's `max_hit` (the admission's `Schedule` or,
        after a connector's lookup, `Connect`), -1 where none was passed. Refused past
        `num_tokens - 1` (the lock step caps it there, the manager would not). Beside a KV
        connector's lookup and a Mamba "align" group since 2026-12-07 (the lock step's
        `connector_cap.py`, the reduced mode's capped lookups: `align_hits.py`)."""
        if max_hit is None:
            return -1
        last = len(tracked.tokens) - 1
        if not 0 <= int(max_hit) <= last:
            self._refuse(f"{method} with max_cache_hit_length {max_hit}: outside 0..{last} "
                         f"(the request's num_tokens - 1)")
        return int(max_hit)

    def _waiting_allocation(self, tracked, given) -> bool:
        """What every allocation of a waiting request shares (an admission, a resumption after
        a KV load): the scheduler's full_sequence_must_fit (the same for all, kept in the
        trace's header), and the watermark's other running requests. The former."""
        whole = bool(given.get("full_sequence_must_fit", False))
        if self._kvfuzz_whole is None:
            vars(self)["_kvfuzz_whole"] = whole
            self.kvfuzz_session.set_header(full_sequence_must_fit=whole)
        elif whole != self._kvfuzz_whole:
            self._refuse("admissions with and without full_sequence_must_fit")
        others = any(t.running for t in self._kvfuzz_requests.values() if t is not tracked)
        watermark = self.kvfuzz_session.header.watermark
        if watermark and bool(given.get("has_scheduled_reqs", True)) != others:
            self._refuse("has_scheduled_reqs is not whether another request runs")
        return whole

    @staticmethod
    def _runs(tracked, tokens: int):
        """What an allocation that was made does to the request's record: `tokens` more
        computed, running."""
        def done():
            tracked.computed += tokens
            tracked.running, tracked.streamed = True, False
        return done

    def _step(self, tracked, request, n, given):
        self._no_hit(given)
        tokens = list(request.all_token_ids)
        known, seen = tracked.tokens, tracked.engine_ids()
        if len(tokens) == len(known) + 1 and tokens[:-1] == seen and \
                tracked.computed == len(known):
            if n != 1 or len(known) >= self.kvfuzz_session.header.max_model_len or \
                    not 0 <= tokens[-1] <= MAX_TOKEN:
                self._refuse(f"a decode step of {n} tokens at {len(known)} tokens")
            known.append(tokens[-1])
            op = Decode(tracked.rid, tokens[-1])
        elif tokens == seen and tracked.computed < len(known) and \
                1 <= n <= len(known) + tracked.ghost + tracked.owed - tracked.computed:
            op = Schedule(tracked.rid, n)
        elif self._placeholder(tracked, request, n, tokens, seen):
            # the token its step in flight samples, and that many drafts after it
            op = Placeholder(tracked.rid, n - 1)
        elif self._sync_drafts(tracked, request, n, tokens, seen):
            # the synchronous scheduler's drafts (fake_grammar.Drafter): its last token and
            # `n - 1` drafts, nothing in flight (sync_draft_ops.py)
            op = Schedule(tracked.rid, n, drafts=n - 1)
        elif request.spec_token_ids and not self.kvfuzz_session.header.async_scheduling:
            # other synchronous steps with drafts (from a token not the last, past the
            # trace's caps): not mapped
            self._refuse(f"a synchronous step of {n} tokens with {len(request.spec_token_ids)} "
                         f"draft tokens for request {request.request_id!r}")
        else:
            self._refuse(f"allocate_slots of {n} tokens for request {request.request_id!r} "
                         f"with {len(tokens)} tokens, {request.num_computed_tokens} computed "
                         f"(the trace has {len(known)}, {tracked.computed})")

        in_flight = self._engine_in_flight(request)  # (0 unless asynchronous: guard_async.py)

        def expected(args):
            if tuple(args[1:4]) != (n, 0, False) or args[6] != in_flight:
                return (f"the lock step allocates with {args}, the engine {n} tokens, "
                        f"{in_flight} in flight")
        return op, expected, self._runs(tracked, n)

    def _no_hit(self, given) -> None:
        if given.get("new_computed_blocks") not in (None,) and \
                any(given["new_computed_blocks"].get_block_ids()) or \
                int(given.get("num_new_computed_tokens", 0)):
            self._refuse("allocate_slots of a running request with a prefix hit")

    def _sampled(self, tracked, request) -> None:
        """The token a running request sampled and never asked a slot for (it is preempted
        before its next step), or, before a `settle`, the tokens its output appended: a
        `sample` op each, so that its next allocation sees them (more than one: accepted
        drafts and the bonus token, `guard_async.py`)."""
        tokens = list(request.all_token_ids)
        known, seen = tracked.tokens, tracked.engine_ids()
        if tokens == seen:
            return
        new = tokens[len(seen):]
        # (all computed; under asynchronous scheduling the token's placeholder slot too)
        # (after a failed synchronous load's cut: the placeholders vLLM left, guard_async.py)
        one = len(new) == 1 and (len(known) <= tracked.computed <= len(known) + 1 +
                                 tracked.ghost or bool(tracked.owed))
        if not (one or self._drafts_sampled(tracked, tokens)) or tokens[:len(seen)] != seen or \
                any(not 0 <= token <= MAX_TOKEN for token in new) or \
                len(tokens) > self.kvfuzz_session.header.max_model_len:
            self._refuse(f"request {request.request_id!r} is preempted with {len(tokens)} "
                         f"tokens, the trace has {len(known)} ({tracked.computed} computed)")
        for token in new:
            known.append(token)
            self.kvfuzz_session.step(Sample(tracked.rid, token))
            tracked.owed = 0
