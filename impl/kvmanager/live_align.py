"""The live driver's answers to the reduced Mamba "align" lock step's reads of every op
(`fuzz/kvmanager/align.py`: `new_step_starts`, `release_copies`, `boundary_offloads`), where an
engine's scheduler drives the manager (`kvfuzz.guard`, `impl/kvmanager/live.py`).

Kvfuzz's own driver makes those calls itself after every op (its every op is a step). A live
manager's are the scheduler's, once a step (vllm 0.33.0 `scheduler.py`: `new_step_starts` as
`schedule()` begins, `take_boundary_state_offloads` and `take_kv_cache_block_copies` after its
allocations): the guard must not make them again, or the engine's manager would forget its
step's Mamba states (`cached_blocks_this_step`) and its connector lose its hand-offs. So here:

- `new_step_starts()`: nothing (the scheduler's own);
- `release_copies()`: the copy-on-write copies queued since the last read, counted and left for
  the scheduler to take (and free: `_free_cow_retained_blocks`);
- `connector_lookup(rid)` where the engine made a plain lookup (its scheduler has no KV
  connector), asked by the reduced mode at every admission (`align_connector.py`): the live
  manager's `get_computed_blocks_for_connector(request)`, made here as a read (it changes
  nothing: `kv_cache_manager.py:330-378`, per-group lookups and `create_kv_cache_blocks`), the
  engine's own lookup kept for the admission's `get_computed_blocks`;
- `finalize_tail(rid)`, asked at every finish as a KV producer's scheduler does: the answer the
  engine's own `finalize_partial_tail_offloads` got at that finish (it consumes the tail, so it
  is made once, by the scheduler: the guard holds its answer in `tails`,
  `guard_mamba_connector.py`), or None ("not asked") where no KV producer's scheduler asked it;
- `take_new_block_ids()`, read around an admission with external tokens (the zeroing records
  beside a Mamba group: `align_external.py`): the records made since the last read, left for
  the scheduler to drain once a step (`_get_new_block_ids_to_zero`);
- `truncate_hit(rid, tokens)`: the scheduler made its `truncate_computed_blocks` (a read)
  itself; made again here on the engine's lookup, for the reads that follow;
- `copies_retained()`: the endpoints of the copies queued and not yet taken, each holding a
  reference until the scheduler frees them after the step's allocations (the reduced mode's
  pool check counts them held: kvfuzz's driver frees them at every op);
- `boundary_offloads()`: the boundary-state hand-offs queued since the last read, left for the
  scheduler to drain (`take_boundary_state_offloads`), in the driver's plain form.

"Since the last read" is by identity of the manager's queued entries (the scheduler's drain
replaces the queue; a free filters it, keeping the entries' objects)."""

from __future__ import annotations


class AlignStepReads:
    """Mixed into `LiveManagerDriver` (its `manager` and `requests`)."""

    def new_step_starts(self) -> None:
        return None  # the scheduler's own call, once a step

    def release_copies(self) -> int:
        return len(self._new_entries("_pending_cow_copies", "_seen_copies"))

    def copies_retained(self) -> list[int]:
        return [int(block.block_id) for manager in self.manager.coordinator.single_type_managers
                for pair in getattr(manager, "_pending_cow_copies", ()) for block in pair]

    def boundary_offloads(self) -> list[tuple[int, int, int, int]] | None:
        managers = self.manager.coordinator.single_type_managers
        if not any(hasattr(m, "_pending_boundary_state_offloads") for m in managers):
            return None
        rids = {request.request_id: rid for rid, request in self.requests.items()}
        return [(rids.get(request_id, -1), int(group), int(block.block_id), int(tokens))
                for request_id, group, block, tokens in
                self._new_entries("_pending_boundary_state_offloads", "_seen_offloads")]

    def finalize_tail(self, rid: int, in_flight: int | None = None):
        # (`in_flight`, the lock step's under asynchronous scheduling: the scheduler's own)
        tails = self.__dict__.setdefault("tails", {})
        return tails.pop(rid, None)  # (above)

    def take_new_block_ids(self) -> list[int]:
        """Each group's records past those seen at the last read (a list the scheduler's drain
        replaced is new whole: `take_new_block_ids` swaps in an empty one)."""
        seen = self.__dict__.setdefault("_seen_records", {})
        new = []
        for index, manager in enumerate(self.manager.coordinator.single_type_managers):
            current = getattr(manager, "new_block_ids", [])
            listed, count = seen.get(index, (None, 0))
            new += [int(block) for block in current[count if listed is current else 0:]]
            seen[index] = (current, len(current))
        return new

    def truncate_hit(self, rid: int, tokens: int) -> None:
        self.hits[rid] = self.manager.truncate_computed_blocks(self.hits[rid], tokens)

    def align_connector_lookup(self, rid: int, cap: int | None = None):
        from kvfuzz.impl.kvmanager.reads import _ids

        blocks, hit, boundary, diverged = self.manager.get_computed_blocks_for_connector(
            self.requests[rid], cap)
        return _ids(blocks), int(hit), int(boundary), bool(diverged)

    def _new_entries(self, queue: str, seen_name: str) -> list:
        """The entries of every group's `queue` not seen at the last read (and now seen)."""
        seen = self.__dict__.setdefault(seen_name, {})
        new = []
        for index, manager in enumerate(self.manager.coordinator.single_type_managers):
            current = list(getattr(manager, queue, ()))
            before = seen.get(index, [])
            new += [entry for entry in current if not any(entry is old for old in before)]
            seen[index] = current
        return new
