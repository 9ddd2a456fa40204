"""Which blocks a settle caches, in the reduced mode of a Mamba "align" group (`align.py`,
`align_caching.py`): under asynchronous scheduling vLLM 0.33.0's `update_from_output` calls
`kv_cache_manager.cache_blocks(request, num_computed_tokens - num_in_flight_tokens)` for the
step whose output it processes (scheduler.py 2403-2415; `align_async.settle_made` says which
settles are made). That is the coordinator's `cache_blocks` an allocation ends with, at the
processed count, so the same pure rule predicts it (`oracle/kvmanager/align_caching.py`):
full attention's full blocks from the request's cached count (and its prompt tail hashed per
fewer tokens than a block), the Mamba group's under its retention mask and its partial tail,
the counts moved as vLLM's `num_cached_block`. What differs from an allocation's:

- no block is popped or copied (a settle allocates nothing);
- the Mamba checkpoint (`MambaManager._checkpoints`) is the one the request's last
  `allocate_slots` set, kept here as it was predicted then (a later rollback of drafts does
  not move it); a refused allocation sets vLLM's to the refused step's, not followed here: a
  settle after one is not judged (`AFTER_REFUSAL`), nor its request again until it is freed;
- `request.num_computed_tokens` while it caches counts the tokens in flight, so a settle never
  keys the shared-prefix junction (`computed < tokens` fails).

An applied settle not judged marks the request's counts unknown (vLLM's moved), so its next
allocation is not judged either: before 2026-12-07 it was, from counts a settle had moved."""

from __future__ import annotations

from kvfuzz.oracle.kvmanager import mamba_align

JUDGED = "which blocks cached: predicted after a settle"
AFTER_REFUSAL = "which blocks cached: a settle after a refused allocation, not judged"
UNKNOWN_COUNTS = "which blocks cached: a settle of a request not judged since its admission"
EVENTS = (JUDGED, AFTER_REFUSAL, UNKNOWN_COUNTS)
_REFUSED = "refused"  # vLLM's checkpoint after a refused allocation: not followed


class AlignCachingSettle:
    """A base of `align_caching.AlignCaching` (its `caching_counts`, `caching_partial`,
    `caching_tokens`, and the lock step's `requests`, `trace`, `stepped`, `count`)."""

    # rid -> (position, table index) of vLLM's Mamba checkpoint after its last allocation,
    # None for none, `_REFUSED` after a refused one (made at the trace's first read)
    caching_checkpoints: dict | None = None
    settle_applied = None  # the rid of the op's settle that applied (`align_async.settled`)

    def caching_noted(self, alloc) -> None:
        """After an op's allocation (`alloc`: `align_queue`'s `queue_alloc`), vLLM's checkpoint
        for the request as its `get_num_blocks_to_allocate` left it."""
        if alloc is None:
            return
        rid = alloc[0]
        if self.stepped != rid:
            self.caching_checkpoints[rid] = _REFUSED
            return
        self.caching_checkpoints[rid] = self.caching_checkpoint(rid, self.requests[rid])

    def caching_checkpoint(self, rid, request):
        """The (position, index) of the checkpoint the request's step just allocated, or None
        (the position as `get_mamba_prefill_checkpoint_position` of the step's end)."""
        index = self.checkpoints.get(rid)
        if index is None:
            return None
        trace = self.trace
        return (mamba_align.checkpoint_position(request.computed, trace.hash_size,
                                                trace.hash_lookahead, trace.eagle), index)

    def caching_settle(self, entries, rid, tables) -> bool:
        """Apply the settle's `cache_blocks` to `entries` (the request's counts moved); False
        where it is not judged (its counts then unknown)."""
        self.settle_applied = None
        request = self.requests.get(rid)
        counts = self.caching_counts.get(rid)
        checkpoint = self.caching_checkpoints.get(rid, _REFUSED)
        if request is None or rid not in tables or counts is None:
            self.count(UNKNOWN_COUNTS)
            return False
        if checkpoint == _REFUSED:
            self.count(AFTER_REFUSAL)
            return False
        self.caching_counts[rid] = self._caching_cache_blocks(
            entries, rid, list(counts), request.computed - request.in_flight, request.computed,
            checkpoint, tables)
        self.count(JUDGED)
        return True
