"""What `KVManagerDriver` reads of a vLLM `KVCacheManager` beside its calls (`driver.py`): block
ids per group in the trace's group order, the scheduler's reads, and what a scheduler drains
every step (copy-on-write copies, Mamba's boundary-state hand-offs, a finished request's partial
tail)."""

from __future__ import annotations

from kvfuzz.impl.blockpool.driver import PoolReader


def _ids(blocks) -> list[list[int]] | None:
    """A `KVCacheBlocks` (or None) as block ids per group."""
    return None if blocks is None else [list(map(int, ids)) for ids in blocks.get_block_ids()]


def _in_trace_order(driver, per_group):
    """Answers per group in the manager's group order, read in the trace's (full attention
    first): reversed where the trace puts full attention's group last (`Trace.full_last`: two
    groups). A shorter answer is reversed too, so it still differs from the trace's."""
    if per_group is None or not driver.full_last:
        return per_group
    return list(per_group)[::-1]


class ManagerReads(PoolReader):
    """What the lock step reads of a manager (`self.manager`) about a request
    (`self.requests[rid]`, a vLLM Request): its tables, the scheduler's reads, and
    `truncate_computed_blocks` of its last lookup (`self.hits[rid]`, the KVCacheBlocks)."""

    full_last = False  # the manager's groups in the trace's order (a driver sets it: below)

    def block_ids(self, rid: int) -> list[list[int]]:
        return _in_trace_order(self, [list(map(int, ids)) for ids in
                                      self.manager.get_block_ids(self.requests[rid].request_id)])

    def block_tables(self, since: int, rids) -> tuple:
        """`block_ids` of each of `rids`, in one answer of what changed since read `since`
        (`ChangedReads`): the lock step reads every request's tables after every op."""
        # (`block_ids` inlined: this runs for every live request after every op)
        get_block_ids, requests = self.manager.get_block_ids, self.requests
        tables = [[list(map(int, ids)) for ids in get_block_ids(requests[rid].request_id)]
                  for rid in rids]
        if self.full_last:  # (asked once a read, not once a request)
            tables = [_in_trace_order(self, table) for table in tables]
        return self.changed("block_tables", since, {"tables": tables})

    def truncate(self, rid: int, tokens: int):
        return _in_trace_order(self, _ids(self.manager.truncate_computed_blocks(self.hits[rid],
                                                                                tokens)))

    def usage(self) -> float:
        return float(self.manager.usage)

    def estimate_cached_tokens(self, rid: int) -> int:
        return int(self.manager.estimate_cached_tokens(self.requests[rid]))

    def block_ids_for_computed_tokens(self, rid: int, computed: int) -> list[list[int]]:
        return _in_trace_order(self, [
            list(map(int, ids)) for ids in self.manager.get_block_ids_for_computed_tokens(
                self.requests[rid].request_id, computed)])

    def common_prefix_blocks(self, rid: int) -> list[int]:
        return _in_trace_order(self, [int(n) for n in self.manager.get_num_common_prefix_blocks(
            self.requests[rid].request_id)])

    def scheduler_reads(self, rid: int, computed: int, names) -> list:
        """The reads `names` (of estimate_cached_tokens, block_ids_for_computed_tokens,
        common_prefix_blocks) of request `rid`, in that order, in one answer: the lock step
        makes them after every op of a request, and one answer is one transcript record where
        three cost three (each checked, weighed, pickled and replayed)."""
        return [self.block_ids_for_computed_tokens(rid, computed)
                if name == "block_ids_for_computed_tokens" else getattr(self, name)(rid)
                for name in names]


class StepReads:
    """What a scheduler drains of the manager every step, or asks of a finished request (a
    mixin of `KVManagerDriver`: its `manager` and `requests`)."""

    def block_copies(self):
        """`take_kv_cache_block_copies()`: the copies as (source, destination) ids, and the
        blocks they retain."""
        copies, retained = self.manager.take_kv_cache_block_copies()
        return ([(int(c.src_block_id), int(c.dst_block_id)) for c in copies],
                [int(block.block_id) for block in retained])

    def release_copies(self) -> int:
        """What the scheduler does every step: take the pending copy-on-write copies and free
        the blocks they retain once the copies ran (`_free_cow_retained_blocks`, synchronous
        scheduling). The number of copies; 0 for a manager without copy-on-write (vLLM
        before 0.26 has no `take_kv_cache_block_copies`: nothing is ever pending)."""
        take = getattr(self.manager, "take_kv_cache_block_copies", None)
        if take is None:
            return 0
        copies, retained = take()
        if retained:
            self.manager.block_pool.free_blocks(retained)
        return len(copies)

    def copies_retained(self) -> list[int]:
        """The blocks copy-on-write copies still retain (a reference each): none here, where
        `release_copies` frees them every op (a live scheduler's: `live_align.py`)."""
        return []

    def boundary_offloads(self) -> list[tuple[int, int, int, int]] | None:
        """`take_boundary_state_offloads()` (drained, as a scheduler with a KV connector does
        every step: a driver of its own manager only, never a live one, whose connector
        takes them), flat: (rid, group, block, boundary tokens); None for a manager without it
        (vLLM before Mamba's boundary hand-offs)."""
        take = getattr(self.manager, "take_boundary_state_offloads", None)
        if take is None:
            return None
        return [(int(rid), int(group), int(block), int(tokens))
                for rid, entries in take().items() for group, block, tokens in entries]

    def finalize_tail(self, rid: int, in_flight: int | None = None
                      ) -> list[tuple[int, int, int]] | None:
        """`finalize_partial_tail_offloads(request)`, as a KV producer's scheduler asks it of a
        finished request before freeing it: (group, block, boundary tokens) entries; None for a
        manager without it. `in_flight` (asynchronous scheduling): the request's tokens in
        flight as it finishes, set first (its last allocation's are stale by then)."""
        finalize = getattr(self.manager, "finalize_partial_tail_offloads", None)
        if finalize is None:
            return None
        if in_flight is not None:
            self.requests[rid].num_in_flight_tokens = in_flight
        return [(int(group), int(block), int(tokens))
                for group, block, tokens in finalize(self.requests[rid])]
