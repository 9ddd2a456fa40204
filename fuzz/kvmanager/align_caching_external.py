"""Which blocks are cached beside a Mamba "align" group with a KV connector: the connector's
part of `align_caching.py` (a mixin of `AlignLockstep`, ahead of `AlignCaching`, whose
`caching_problems` dispatches the ops below here). Read in vLLM 0.33.0:

- an admission with external tokens (`allocate_slots` with `num_external_computed_tokens`;
  its local hit block-aligned, `align_external.connect` drops a partial tail): the hit's
  blocks added (`add_local_computed_blocks`) set each group's cached count to its table's
  length then, the skipped blocks' nulls and the hit blocks past them: full attention's the
  hit's blocks, the Mamba group's max(its hit blocks, (c - 1) // b) (`get_num_skipped_tokens`
  c - 1, c the local and external tokens), no partial hit; the external blocks
  (`allocate_external_computed_blocks`) leave the counts so. Then an asynchronous load
  (`delay_cache_blocks`) caches nothing; a synchronous one caches as a step does
  (`cache_blocks(min(c + new, tokens))`, the request's computed tokens 0 while it runs);
- a load reported done (`_update_waiting_for_remote_kv`): `cache_blocks(request, c)` with the
  request's computed tokens c (no prefill checkpoint: a load's admission has none), from the
  counts its admission left; a partial tail it keys sets the Mamba count to that block's
  index and the resumed step copies it (`_partial_hit_reqs`), as after a step;
- a failed load (always the request's whole here: `free`), a finish's `remove_skipped_blocks`
  (Mamba states freed): no entry moves (a freed block keeps its entries until popped);
- the resumed step: a running request's allocation (`align_caching._caching_allocation`) from
  the counts the load left.

`caching_external` answers for these ops: True where it predicted `entries`, False where it
did not (then counted `SKIPPED`), None for any other op.
"""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.align_queue import EXTERNAL
from kvfuzz.oracle.kvmanager import align_caching as rule

ADMITTED = "which blocks cached: predicted after a connector's admission"
LOADED = "which blocks cached: predicted after a load reported"
UNCHANGED = "which blocks cached: predicted unchanged (a failed load, remove_skipped_blocks)"
EVENTS = (ADMITTED, LOADED, UNCHANGED)


class AlignCachingExternal:
    """The connector's ops of the cache-map check (`align_caching.AlignCaching` calls
    `caching_external` first; its `_caching_cache_blocks` is the shared rule)."""

    def caching_external(self, name, op, alloc, entries, tables) -> bool | None:
        if alloc is not None and alloc[1] == EXTERNAL:
            return self._caching_admitted(entries, alloc, tables)
        if name == "Loaded":
            return self._caching_loaded(entries, op, tables)
        if name == "RemoveSkipped":
            self.count(UNCHANGED)
            return True
        return None

    def _caching_admitted(self, entries, alloc, tables) -> bool:
        rid, local, external = alloc[0], alloc[2], alloc[3]
        for block in self.queue_evicted:
            entries.drop(block)
        if not any(tables.get(rid) or ()):  # refused: nothing added, nothing cached
            self.caching_counts[rid] = None
            return True
        size, total = self.trace.block_size, local + external
        counts = rule.external_counts(tuple(map(len, self.hit_blocks)), total, size)
        self.caching_partial.pop(rid, None)
        if rid in self.loaded_end:  # an asynchronous load: caching delayed
            self.caching_counts[rid] = counts
        else:
            request = self.requests[rid]
            self.caching_counts[rid] = self._caching_cache_blocks(
                entries, rid, counts, min(request.computed, len(request.tokens)), 0,
                self.caching_checkpoint(rid, request), tables)
        self.count(ADMITTED)
        return True

    def _caching_loaded(self, entries, op, tables) -> bool:
        rid = op.rid
        for block in self.queue_evicted:
            entries.drop(block)
        counts, request = self.caching_counts.get(rid), self.requests.get(rid)
        if self.stepped != rid:  # failed (freed: no entry moves), or a load not in flight
            if request is not None and request.computed == 0 and rid not in self.loaded_end:
                self.caching_counts.pop(rid, None)
                self.caching_partial.pop(rid, None)
                self.count(UNCHANGED)
            return True
        if counts is None:
            return False
        end = self.loaded_end[rid]
        self.caching_counts[rid] = self._caching_cache_blocks(
            entries, rid, list(counts), min(end, len(self.requests[rid].tokens)), end, None,
            tables)
        self.count(LOADED)
        return True
