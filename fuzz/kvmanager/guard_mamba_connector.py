"""The live kvmanager guard's mapping of a KV connector's calls beside a Mamba "align" group
(mixed into `GuardedManager`, `guard.py`), under vLLM 0.33.0's synchronous scheduler
(`vllm_workloads.MAMBA_CONNECTOR`), judged in the reduced mode (`align_external.py`):

- `get_computed_blocks_for_connector(request)`: full attention's own hit, flagged
  `hit_diverged` where the Mamba group's state lags it; checked at once as the reduced mode's
  `connect` checks it (`align_connector.expectation`, and its blocks), not as a plain hit.
  Where the hit diverged and the connector loads nothing the scheduler then asks
  `get_computed_blocks` (scheduler.py:1199), checked as a plain lookup; both take the caller's
  cap where auxiliary outputs pass one (since 2026-12-07, `AUX_MAMBA_CONNECTOR`: the reduced
  mode's capped expectations, `align_connector`, `align_hit`); the live driver answers
  the reduced mode's lookups from the engine's (`impl/kvmanager/live.py`);
- the admission after it: `connect` (`guard_connector.py`), an asynchronous load or, with no
  external tokens, a plain admission through the connector;
- `finalize_partial_tail_offloads(request)` at a finish (a KV producer's, `kv_both`:
  `_connector_finished`, scheduler.py:3350-3372): it consumes the request's partial tail, so it
  is made once, by the engine; its answer is held for the reduced mode's `finalize_tail` read
  of the `finish` that follows (`boundary.tail_problems`: none here, as no hit ends inside a
  block, but a wrong entry is caught);
- `remove_skipped_blocks(request, computed - in flight)` right after it: `remove_skipped(rid)`
  (`align_external.remove_skipped`: exactly the Mamba states below (p - 1) // b freed); under
  asynchronous scheduling an abort's with up to two steps in flight, `remove_skipped(rid,
  older)`, and its deferred free (`flight_finish.py`, `align_deferred.py`);
- a one-token prompt loaded whole (since 2026-12-07): after its load it holds its blocks with
  no computed token and the scheduler looks it up again (`align_external_single.py`): the
  lookup again as any connector lookup, a load again `connect`, the plain step after it the
  reduced mode's resumption (`resume`, `_connect_method`; `_relooked` reads the engine's
  manager before the call).
The zeroing records (`take_new_block_ids`, turned on by Mamba layers) are the scheduler's to
drain: the live driver reads those made since its last read (`live_align.py`), which the
reduced mode judges after an admission with external tokens.
"""

from __future__ import annotations

from kvfuzz.impl.kvmanager.reads import _ids


class MambaConnectorCalls:
    """Mixed into `GuardedManager` (its session, driver, records)."""

    def _beside_mamba(self) -> bool:
        return bool(self.kvfuzz_session.header.mamba_mode)

    def _connector_lookup_problems(self, rid: int, blocks, hit, boundary, diverged,
                                   cap: int = -1):
        """The engine's connector lookup against the reduced mode's expectation of it, under
        the caller's `cap` (-1: none)."""
        return self.kvfuzz_session.lock.connector_lookup_problems(
            rid, (_ids(blocks), int(hit), int(boundary), bool(diverged)), cap)

    def _hold_tail(self, request, perform):
        """`finalize_partial_tail_offloads`, made for the engine, its answer held for the
        `finish` op's read (a request the guard never saw: let through)."""
        tails = perform()
        tracked = self._kvfuzz_requests.get(request.request_id)
        driver = self._kvfuzz_driver
        if tracked is not None and driver is not None:
            driver.__dict__.setdefault("tails", {})[tracked.rid] = [
                (int(group), int(block), int(tokens)) for group, block, tokens in tails]
        return tails

    def _plain_beside_mamba(self, tracked, external: int, load: bool) -> bool:
        """Whether a connector admission is, beside a Mamba group, the reduced mode's plain one
        (no external tokens: `align_external.connect` makes `allocate_slots`, or `resume` for a
        one-token prompt loaded whole, looked up again while it holds its blocks:
        `align_external_single.py`, which makes a load of it again its `connect`)."""
        return self._beside_mamba() and not external

    def _relooked(self, rid: int) -> bool:
        """A one-token prompt loaded whole, looked up again: waiting with no computed token
        while the engine's manager holds its blocks (only then: a failed load or a preemption
        frees them). Read before the allocation is made."""
        groups = self._kvfuzz_object.coordinator.single_type_managers
        return any(tracked.rid == rid and not tracked.computed and not tracked.running and
                   any(group.req_to_blocks.get(request_id) for group in groups)
                   for request_id, tracked in self._kvfuzz_requests.items())

    def _connect_method(self, op) -> str:
        """The lock step's driver method that makes a `connect` op's allocation."""
        if not self._beside_mamba() or op.external:
            return "connect"
        return "resume" if self._relooked(op.rid) else "allocate_slots"
