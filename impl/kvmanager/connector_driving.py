"""The KV-cache-manager driver's calls for a scheduler with a KV connector (`driver.py`'s
`KVManagerDriver` mixes them in): its lookup, the trim of a local hit, the admission with
external tokens (loaded with the step or asynchronously), the resumption after a load, and
what a load reported done or failed asks (caching, zeroing records)."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import taken
from kvfuzz.impl.kvmanager.reads import _ids, _in_trace_order
from kvfuzz.impl.kvmanager.released_api import asked


class ConnectorDriving:
    """Mixed into `KVManagerDriver` (its manager, requests, hits, lookahead and `_rehash`)."""

    def connector_lookup(self, rid: int, cap: int | None = None):
        """`get_computed_blocks_for_connector`: the lookup of a scheduler with a KV connector,
        (blocks per group, hit, boundary, whether the hit ran past a lagging group); `cap`:
        the scheduler's `max_cache_hit_length` (an auxiliary-output connector's), passed only
        where given."""
        self._rehash(rid)
        blocks, hit, boundary, diverged = self.manager.get_computed_blocks_for_connector(
            self.requests[rid], *(() if cap is None else (cap,)))
        self.hits[rid] = blocks
        self.requests[rid].shared_prefix_boundary = int(boundary)
        return _in_trace_order(self, _ids(blocks)), int(hit), int(boundary), bool(diverged)

    def truncate_hit(self, rid: int, tokens: int) -> None:
        """The scheduler's trim of a local hit ending inside a block where the connector holds
        more than its partial tail (`truncate_computed_blocks` to the block-aligned hit)."""
        self.hits[rid] = self.manager.truncate_computed_blocks(self.hits[rid], tokens)

    def connect(self, rid: int, new: int, hit_tokens: int, external: int, load: bool,
                reserve: int, whole: bool, others_running: bool, written=None):
        """The scheduler's admission with a KV connector: the external tokens counted as
        computed; an asynchronous load (`load`) allocates no slots of its own, delays caching,
        leaves `reserve` blocks free and skips zeroing the external blocks of the groups it
        writes (`written`; None: every group)."""
        request, method = self.requests[rid], self.manager.allocate_slots
        settings = {**taken(method, has_scheduled_reqs=others_running),
                    **asked(method, full_sequence_must_fit=whole)}
        if load:
            settings |= asked(method, delay_cache_blocks=True, reserved_blocks=reserve,
                              skip_zeroing_group_ids=tuple(range(len(request_groups(self))))
                              if written is None else tuple(written))
        elif self.lookahead:
            settings["num_lookahead_tokens"] = self.lookahead
        got = method(request, new, num_new_computed_tokens=hit_tokens,
                     new_computed_blocks=self.hits[rid],
                     num_external_computed_tokens=external, **settings)
        return _in_trace_order(self, _ids(got))

    def resume(self, rid: int, new: int, others_running: bool, whole: bool = False,
               in_flight: int = 0):
        """The first allocation of a request whose load is done: waiting, with computed
        tokens, no lookup (the scheduler's `else` branch of an admission), with the
        scheduler's full_sequence_must_fit as every waiting request's allocation has it; or
        of one resuming after a streaming update, with the tokens of the step in flight at
        its stop (asynchronous scheduling)."""
        request, method = self.requests[rid], self.manager.allocate_slots
        request.num_in_flight_tokens = in_flight
        more = {"num_lookahead_tokens": self.lookahead} if self.lookahead else {}
        return _in_trace_order(self, _ids(method(
            request, new, **taken(method, has_scheduled_reqs=others_running),
            **asked(method, full_sequence_must_fit=whole), **more)))

    def cache_blocks(self, rid: int, computed: int) -> None:
        self.manager.cache_blocks(self.requests[rid], computed)

    def record_blocks_for_zeroing(self, rid: int, start: int) -> None:
        self.manager.record_blocks_for_zeroing(self.requests[rid].request_id, start)

    def take_new_block_ids(self) -> list[int]:
        return [int(b) for b in self.manager.take_new_block_ids()]


def request_groups(driver) -> tuple:
    """The manager's KV-cache groups."""
    return tuple(driver.manager.kv_cache_config.kv_cache_groups)
