"""The live kvmanager guard's mapping of a KV connector's calls (mixed into `GuardedManager`,
`guard.py`) onto the trace's connector ops (`strategies/kvmanager/connector_ops.py`), as vLLM
0.33.0's scheduler makes them (`Scheduler.schedule`, `_update_waiting_for_remote_kv`,
`_connector_finished`):

- `get_computed_blocks_for_connector(request)`: the lookup of a connector that can complete
  divergent hybrid hits; checked at once like `get_computed_blocks`, its `hit_diverged` too
  (False without a Mamba group), a problem reported as a `connect` op's lookup; its
  `max_cache_hit_length` (auxiliary outputs on, `vllm_aux.py`) the `connect`'s `max_hit`
  (since 2026-12-07), the admission's external tokens those vLLM's `cap_external_hit` left
  (others, past the cap or off a block, refused by name);
- the admission's `allocate_slots` after a connector's lookup, or with external tokens
  (`num_external_computed_tokens`, from the connector's `get_num_new_matched_tokens`), or
  delaying its caching (an asynchronous load, with its `reserved_blocks`): `connect(rid,
  chunk, external, load, reserve)`; a load leaves the request waiting for it; a synchronous
  load that leaves one token, padded with placeholder drafts (`pad_spec_decode`, `padding.py`):
  `connect` with `pad` (and `rows_in_flight` under asynchronous scheduling, the rows then
  counted computed and in flight until the output, as vLLM counts them);
- `cache_blocks(request, n)` of a request whose load is in flight, `n` its computed tokens: the
  load reported done, `loaded(rid)` (the scheduler then recomputes a whole prompt's last token);
  `n` fewer, cut at a block at or past the local hit: the load failed with that prefix valid,
  `loaded(rid, n)`; `free(request)` of it, not finished: it failed with nothing valid,
  `loaded(rid, 0)` (under the "recompute" policy for load failures); finished (an abort during
  its load, freed when the load is reported): `finish(rid)`;
- a running request whose computed tokens the scheduler cut to a block after its synchronous
  load failed (no call, "recompute" policy), seen at its next `allocate_slots`: `loaded(rid,
  n)` first (the judge's rewind of a request right after its synchronous `connect`);
- the next `allocate_slots` of that request (waiting, computed tokens, no lookup): `schedule`,
  which the judge runs as the resumption (`KVManagerLockstep.schedule`); padded where the load
  left one token (a whole prompt loaded): `schedule` with `pad` (and `rows_in_flight` under
  asynchronous scheduling);
- `finalize_partial_tail_offloads` (at a finish, for a producer) changes nothing here: it
  finalizes Mamba "align" tails alone (beside one: `guard_mamba_connector.py`);
- `remove_skipped_blocks` (before the connector's `request_finished`) frees what a sliding
  window or a Mamba "align" group skips: `remove_skipped(rid)` with one (full attention skips
  nothing: no op); under asynchronous scheduling below the tokens in flight, an abort's up to
  the step before the trace's in flight too (`remove_skipped(rid, older)`: `flight_finish.py`).
The connector's own calls (`get_num_new_matched_tokens`, `update_state_after_alloc`,
`request_finished`, `build_connector_meta`) reach the manager only through these.

A connector that loads some groups only (`skip_zeroing_group_ids` a part of the groups) is a
`connect` with those groups `written`. Deferred frees
(`pop_blocks_for_free`) are mapped in `guard_deferred.py`, zeroing (`take_new_block_ids`, a
failed load's `record_blocks_for_zeroing`) in `guard_zeroing.py`.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.guard import modelled
from kvfuzz.fuzz.kvmanager.flight_finish import older_in_flight
from kvfuzz.fuzz.kvmanager.padding import padding
from kvfuzz.strategies.kvmanager.connector_ops import EVERY_GROUP, Connect, Cut, Loaded
from kvfuzz.strategies.kvmanager.trace import Finish, Processed, RemoveSkipped, Schedule

# allocate_slots' connector arguments and their values without a connector admission.
CONNECTOR_ARGS = {"num_external_computed_tokens": 0, "delay_cache_blocks": False,
                  "reserved_blocks": 0, "skip_zeroing_group_ids": ()}


class ConnectorCalls:
    """Mixed into `GuardedManager` (its records, `_lookup`, `_run`, `_refuse`)."""

    @modelled
    def get_computed_blocks_for_connector(self, request, max_cache_hit_length=None):
        return self._lookup("get_computed_blocks_for_connector", request,
                            max_cache_hit_length)

    @modelled
    def cache_blocks(self, request, num_computed_tokens):
        manager = self._kvfuzz_object
        tracked = self._kvfuzz_requests.get(request.request_id)
        if tracked is not None and tracked.running and not tracked.loading:
            return self._settle(tracked, request, int(num_computed_tokens))
        if tracked is None or not tracked.loading:
            self._refuse(f"cache_blocks of request {request.request_id!r}, whose KV load is not "
                         f"in flight (the trace caches with its allocations)")
        n = int(num_computed_tokens)
        size = self.kvfuzz_session.header.block_size
        # a failed load keeps a valid prefix cut at its first failed block (the scheduler's
        # `_update_requests_with_invalid_blocks`), at or past the local hit, or below it where
        # that block is one of the hit's (another request's failed synchronous load it hit)
        failed = 0 < n < tracked.computed and n % size == 0
        if request.num_computed_tokens != n or not (n == tracked.computed or failed):
            self._refuse(f"cache_blocks of {n} tokens of r{tracked.rid}'s load of "
                         f"{tracked.computed} (its hit {tracked.hit}): not a load done, nor a "
                         f"failed one's valid prefix")
        rid = tracked.rid
        self._kvfuzz_lookups.clear()
        inside = failed and n < tracked.hit // size * size
        result = self._run(Loaded(rid, n if failed else -1, inside), "cache_blocks",
                           lambda: manager.cache_blocks(request, num_computed_tokens),
                           lambda args: None if tuple(args) == (rid, n) else
                           f"the lock step caches {args}, the engine r{rid}'s {n} tokens")
        tracked.loading = False
        # as the scheduler (and the judge): a whole prompt loaded recomputes its last token
        tracked.computed = n - 1 if n == len(tracked.tokens) else n
        return result

    def _failed_load(self, tracked, request):
        """`free` of a request whose load is in flight. Not finished: its load failed with
        nothing valid (the scheduler's `_update_waiting_for_remote_kv`), `loaded(rid, 0)`, and
        it is admitted again from the start. Finished: it was aborted during its load
        (`finish_requests`, or the "fail" policy for load failures), freed once the load is
        reported, `finish(rid)`: its blocks go uncached."""
        manager, rid = self._kvfuzz_object, tracked.rid
        finished = request.is_finished()
        self._kvfuzz_lookups.clear()
        result = self._run(Finish(rid) if finished else Loaded(rid, 0), "free",
                           lambda: manager.free(request),
                           lambda args: None if tuple(args) == (rid, finished) else
                           f"the lock step frees {args}, the engine r{rid} during or after "
                           f"its load (finished: {finished})")
        if finished:
            del self._kvfuzz_requests[request.request_id]
        else:
            tracked.loading, tracked.computed = False, 0
        return result

    def _sync_load_failed(self, tracked, request) -> None:
        """At a running request's next allocation: computed tokens the scheduler cut for a
        failed KV block ("recompute" policy: no call to the manager, the blocks stay cached).
        After its own synchronous load, to a block at or past the local hit: `loaded(rid, n)`.
        Otherwise, under the synchronous scheduler (`_update_requests_with_invalid_blocks`), a
        failed block it holds that it is the first in the running queue to hold, which cuts it
        to that block's start, or one a request before it marked, which sets it back to its
        computed tokens before its last step: `cut(rid, n)`."""
        sync, tracked.sync_load = tracked.sync_load, None
        n, size = int(request.num_computed_tokens), self.kvfuzz_session.header.block_size
        if not tracked.running or n >= tracked.computed:
            return
        if sync is not None:
            hit, end, computed = sync
            if computed == tracked.computed and not n % size and hit // size * size <= n < end:
                self.kvfuzz_session.step(Loaded(tracked.rid, n))  # no call: nothing made
                tracked.computed = n
                return
        elif self.kvfuzz_session.header.async_scheduling:
            return  # (a shared failed block's cut is written there: guard_async._async_cut)
        # (a block below its computed tokens: below those before its last step where that
        # step's output reported the failure, below all of them where the request was not in
        # that step, `num_scheduled_tokens.get(req_id, 0)`)
        before = tracked.before
        if self.kvfuzz_session.header.async_scheduling or (n % size and n != before):
            load = "" if sync is None else f" (its synchronous load: hit {sync[0]}, to {sync[1]})"
            self._refuse(f"request {request.request_id!r} rewound to {n} computed tokens from "
                         f"{tracked.computed}: neither its computed tokens before its last "
                         f"step ({before}) nor a block's start{load}")
        self.kvfuzz_session.step(Cut(tracked.rid, n))  # no call: nothing made
        tracked.computed = n

    @modelled
    def finalize_partial_tail_offloads(self, request):
        """Mamba "align" groups' tails alone (a KV producer's): nothing without one; beside
        one, its answer held for the `finish` that follows (`guard_mamba_connector.py`)."""
        perform = lambda: self._kvfuzz_object.finalize_partial_tail_offloads(  # noqa: E731
            request)
        return self._hold_tail(request, perform) if self._beside_mamba() else perform()

    @modelled
    def remove_skipped_blocks(self, request_id, processed_computed_tokens,
                              num_prompt_tokens=None):
        """What a sliding window skips, freed before the connector reads the block table
        (`_connector_finished`): nothing with full attention alone (it skips no tokens, and no
        op is written); with a window, `remove_skipped(rid)` of a request whose computed tokens
        are the trace's."""
        manager = self._kvfuzz_object
        perform = lambda: manager.remove_skipped_blocks(  # noqa: E731
            request_id, processed_computed_tokens, num_prompt_tokens)
        tracked = self._kvfuzz_requests.get(request_id)
        if not (self.kvfuzz_session.header.window or self._beside_mamba()) or tracked is None:
            return perform()  # nothing skipped, or a request the manager never saw
        processed = int(processed_computed_tokens)
        # (an abort's tokens in flight: the trace's steps in flight and perhaps the one before;
        # the processed count the scheduler passes is the lock step's to judge)
        actual = self._engine_in_flight(tracked.engine) if tracked.engine is not None else 0
        flights = older_in_flight(tracked, actual)
        if flights is None or num_prompt_tokens not in (None, tracked.prompt):
            self._refuse(f"remove_skipped_blocks of request {request_id!r} at {processed} "
                         f"tokens (prompt {num_prompt_tokens}) with {actual} in flight, where "
                         f"the trace has {tracked.computed} computed, {tracked.flights} in "
                         f"flight")
        self._kvfuzz_lookups.clear()
        rid, (outputs, older) = tracked.rid, flights
        for _ in range(outputs):  # (outputs that made no call: prefill chunks')
            self.kvfuzz_session.step(Processed(rid))
            tracked.flights.pop(0)
        return self._run(RemoveSkipped(rid, older), "remove_skipped_blocks", perform,
                         lambda args: None if tuple(args) == (rid, processed) else
                         f"the lock step removes {args}, the engine r{rid}'s at {processed}")

    # -- mapping (from GuardedManager.allocate_slots) ----------------------------------------
    def _no_connector_args(self, connector: dict) -> None:
        for name, value in connector.items():
            if connector[name] not in (CONNECTOR_ARGS[name], None, [], ()):
                self._refuse(f"allocate_slots with {name}={value!r} outside a connector's "
                             f"admission")

    def _connector_admission(self, tracked, n: int, hit: int, whole: bool, connector: dict,
                             cap: int = -1):
        """An admission after a connector's lookup or with external tokens: `connect`, with
        the caller's `cap` on its lookup (-1: none)."""
        rid, left = tracked.rid, len(tracked.tokens) - hit
        external = int(connector["num_external_computed_tokens"])
        load = bool(connector["delay_cache_blocks"])
        reserve = int(connector["reserved_blocks"] or 0)
        size = self.kvfuzz_session.header.block_size
        if cap >= 0 and external and ((hit + external) % size or hit + external > cap):
            # (vLLM's `cap_external_hit` drops them: the trace's `connect` would too)
            self._refuse(f"a connector admission of r{rid} with {external} external tokens past "
                         f"its hit of {hit}, beyond the caller's cap of {cap} or off a block "
                         f"of {size}")
        written, skipped = EVERY_GROUP, set()
        if load:
            groups = len(self._kvfuzz_object.kv_cache_config.kv_cache_groups)
            skipped = set(connector["skip_zeroing_group_ids"] or ())
            if n or not 1 <= external <= left or not skipped <= set(range(groups)):
                self._refuse(f"an asynchronous load of {external} external tokens with {n} new "
                             f"and groups {sorted(skipped)} loaded, of {groups} (the trace's "
                             f"loads take no new tokens and name groups the manager has)")
            if skipped != set(range(groups)):  # a load of some groups only
                written = sum(1 << group for group in skipped)
        # a synchronous load that leaves one token, padded with placeholder drafts; beside a
        # Mamba "align" group a plain admission through the connector (no external tokens:
        # the reduced mode's plain one, whose rows the aligned split kept or dropped whole)
        beside = self._beside_mamba()
        pad = 0 if load else padding(self.kvfuzz_session.header, n, left - external,
                                     hit + external, align=beside and not external)
        # under asynchronous scheduling the rows stay computed and in flight until the output
        held = self._rows_in_flight(pad)
        if beside and external and not load and n > left - external:
            self._refuse(f"a synchronous load of {external} external tokens padded to {n} new "
                         f"beside a Mamba group (the reduced mode's admission with external "
                         f"tokens reads no `pad`)")
        if not load and (reserve or not 1 <= n - pad <= left - external):
            self._refuse(f"a connector admission of {n} new tokens and {external} external "
                         f"with {left} left after its hit ({reserve} blocks reserved)")
        engine = (0 if load else n, hit, external, load, reserve, whole)
        some = () if written == EVERY_GROUP else (tuple(sorted(skipped)),)
        plain = self._plain_beside_mamba(tracked, external, load)  # (guard_mamba_connector.py)

        relooked = plain and self._relooked(rid)  # (a resumption: guard_mamba_connector.py)

        def expected(args):
            if relooked:  # `resume`'s arguments (no hit: the lookup found none)
                if (args[1], args[3], hit) != (n, whole, 0):
                    return f"the lock step resumes with {args}, the engine with {(n, hit, whole)}"
            elif plain:  # the reduced mode's plain admission: allocate_slots' arguments
                if tuple(args[1:5]) != (n, hit, True, whole):
                    return f"the lock step admits with {args}, the engine with {(n, hit, whole)}"
            elif tuple(args[1:7]) != engine or tuple(args[8:]) != some:
                return f"the lock step connects with {args}, the engine with {engine + some}"

        def done():
            if load:  # the request waits for its load: computed tokens, not running
                tracked.computed, tracked.loading, tracked.hit = hit + external, True, hit
            else:  # the placeholders are rejected drafts once the step's output is processed
                tracked.computed, tracked.running = hit + external + n - (0 if held else pad), True
                tracked.sync_load = (hit, hit + external, tracked.computed) if external \
                    else None
                # under asynchronous scheduling the load's failure is reported with its step's
                # output, after the request's next step is scheduled (`_async_sync_cut`): its
                # (local hit, end, computed tokens after its admission, padded rows held)
                tracked.async_sync_end = (hit, hit + external, tracked.computed,
                                          pad if held else 0) \
                    if external and self._asynchronous() else None
        return Connect(rid, 0 if load else n, external, load, reserve, written, pad, held,
                       cap), expected, done

    def _resumption(self, tracked, request, n: int, given):
        """The first allocation after a KV load: waiting, with computed tokens, no lookup."""
        self._no_hit(given)
        self._same_tokens(request, tracked)
        whole = self._waiting_allocation(tracked, given)
        left = len(tracked.tokens) - tracked.computed
        # the load left one token (a whole prompt loaded: its last): padded with placeholders
        pad = padding(self.kvfuzz_session.header, n, left, tracked.computed, align=True)
        if not 1 <= n - pad <= left:
            self._refuse(f"allocate_slots of {n} tokens resumes request "
                         f"{request.request_id!r} with {left} left")

        # (tokens in flight: a streaming stop's step, under asynchronous scheduling)
        in_flight = self._engine_in_flight(request)

        def expected(args):
            if (args[1], args[3], args[4]) != (n, whole, in_flight):
                return (f"the lock step resumes with {args}, the engine with "
                        f"{(n, whole, in_flight)}")
        held = self._rows_in_flight(pad)  # counted computed and in flight (guard_async.py)
        return Schedule(tracked.rid, n, pad, rows_in_flight=held), expected, \
            self._runs(tracked, n - (0 if held else pad))

    # -- the connector's lookup, checked at once ----------------------------------------------
    @staticmethod
    def _diverged_problems(diverged: bool) -> list[tuple[str, str]]:
        """Without a Mamba group a connector's hit never diverges (the judge's words)."""
        return [] if not diverged else [
            ("prefix hit", "get_computed_blocks_for_connector: hit_diverged expected False, "
                           "actual True")]

    @staticmethod
    def _lookup_op(rid: int, connector: bool, cap: int = -1):
        """The op whose replay makes the lookup that was checked: a `connect` (its lookup is
        the connector's) of one token and no external ones, or a `schedule`, each with the
        caller's `cap`."""
        return Connect(rid, 1, 0, max_hit=cap) if connector else Schedule(rid, 1, max_hit=cap)
