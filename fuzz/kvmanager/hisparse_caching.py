"""Which blocks are cached on HiSparse's device pool (`hisparse.py`): after every op, the device
pool's cache entries (the indexer's, full attention in vLLM 0.33.0's `FullAttentionManager`, and
beside a Mamba "align" group, "hisparse cow", the Mamba group's; the resident pages and the hot
region cache nothing: `_HiSparseAuxiliaryManager.cache_blocks`) against those read after the op
before, with the "align" mode's rule (`oracle/kvmanager/align_caching.py`, through
`AlignCaching._caching_cache_blocks`, the indexer taking full attention's part; on the plain
profiles, since 2026-12-07, its `full_attention` alone, hashed per block: the full blocks from
the request's cached count, nothing partial): less the entries of the cached blocks the op's
pops evicted (the free queue's prediction, `hisparse_queue.py`), an eviction's or a reset's,
with a running request's Mamba copy-on-write moving its partial tail's entries to the copy, plus
what each allocation's `cache_blocks` adds and re-keys (each request's cached counts per group
tracked as vLLM's `num_cached_block`: an admission's from its hit, cdiv or floor at a hit inside
a block). Not judged (counted, `SKIPPED`): an op that changed device entries otherwise, and a
request's steps after one such (its counts unknown until it is freed). A second connector's
import ("hisparse import"), judged since 2026-12-08: its admission caches nothing
(`delay_cache_blocks`: only its pops' evictions), its load's report caches the indexer's full
blocks from its hit's count to the valid tokens (the scheduler's `cache_blocks` in
`_update_waiting_for_remote_kv`) and leaves the count there (`imported`), the resumption is a
step as any.
The host pool's entries (publication once written back): `hisparse_hostcache.py`."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.align_caching import map_difference
from kvfuzz.fuzz.kvmanager.hisparse_checks import INDEXER
from kvfuzz.oracle.kvmanager import align_caching as rule
from kvfuzz.oracle.kvmanager.hybrid import cdiv

JUDGED = "device cache map predicted (HiSparse's device pool)"
SKIPPED = "device cache map not judged (an op out of reach)"
EVENTS = (JUDGED, SKIPPED)


class DeviceCaching:
    """Mixed into `HiSparseLockstep` (its `AlignLockstep` part lends `_caching_step_blocks`);
    `PoolQueues.queue_pool_problems` calls `device_caching_problems` once the queues agree."""

    def start_device_caching(self) -> None:
        self.caching_counts, self.caching_tokens, self.caching_partial = {}, {}, {}
        # this op's import admissions (rid, None) and load reports (rid, (cached, tokens)):
        # `hisparse_import.py`
        self.caching_imports: list = []

    def _to_rule(self, entry) -> tuple:
        """A device entry (hash, the trace's group) as the rule names groups (the Mamba group
        only beside one: "hisparse cow")."""
        mamba = {self.groups - 1: rule.MAMBA} if self.cow else {}
        group = ({INDEXER: rule.FULL} | mamba).get(entry[1], 10 + entry[1])
        return (entry[0], group)

    def _from_rule(self, entry) -> tuple:
        back = {rule.FULL: INDEXER} | ({rule.MAMBA: self.groups - 1} if self.cow else {})
        return (entry[0], back.get(entry[1], entry[1] - 10))

    def import_allocated(self, rid, host_hit, host_new, device_hit, device_new) -> None:
        """An import's admission: nothing cached (`delay_cache_blocks`); its pops' evictions
        judged."""
        self.caching_imports.append((rid, None))
        super().import_allocated(rid, host_hit, host_new, device_hit, device_new)

    def imported(self, rid: int, tokens: int) -> None:
        """A second connector's import reported with `tokens` valid: the scheduler's
        `cache_blocks(request, tokens)` after it caches the indexer's full blocks from its
        count at the admission (its hit's blocks, `add_local_computed_blocks`; delayed
        caching) to tokens // b, and leaves the count there."""
        size = self.trace.block_size
        self.caching_imports.append((rid, (cdiv(self.requests[rid].hit, size), tokens)))
        self.caching_counts[rid] = [tokens // size, 0]

    def device_caching_problems(self, before, after, evicted, steps, hits, copy, live,
                                freed) -> list[tuple[str, str]]:
        """`before`, `after`: the device keys read after the op before and this one;
        `evicted`: the cached blocks its pops took; `steps`: (rid, new blocks) of its
        allocations; `hits`: rid -> its admission's hit blocks (host, device, indexer, Mamba);
        `copy`: a running request's Mamba copy, or None; `freed`: the requests the op freed."""
        for rid in freed:
            self.caching_counts.pop(rid, None)
            self.caching_partial.pop(rid, None)
        entries = rule.Entries([_mapped(k, self._to_rule) for k in before],
                               lambda key: self.caching_tokens.get(key[0], 0))
        if self.reset_done:
            entries = rule.Entries([None] * len(after), entries.tokens)
        for block in tuple(self.evicted) + tuple(evicted):
            entries.drop(block)
        imports, self.caching_imports = self.caching_imports, []
        for rid, report in imports:  # (an op imports, or steps: never both)
            if report is not None and rid in live:
                request, size = self.requests[rid], self.trace.block_size
                rule.full_attention(entries, live[rid][INDEXER], report[0], report[1],
                                    request.hashes(size), request.prompt, size, size, False)
        for rid, _ in steps:
            if not self._device_step(entries, rid, hits, copy, live):
                self.caching_counts[rid] = None
                return self._device_skipped(before, after)
        if not steps and not freed and not imports and not self.evicted and \
                not self.reset_done:
            return self._device_skipped(before, after)
        self.count(JUDGED)
        expected = [_mapped(k, self._from_rule) for k in entries.as_keys(len(after))]
        what = map_difference(expected, after, before)
        if what is None:
            return []
        return [("which blocks cached", f"device pool: {what}")]

    def _device_skipped(self, before, after) -> list:
        if before != after:
            self.count(SKIPPED)
        return []

    def _device_step(self, entries, rid, hits, copy, live) -> bool:
        admission = rid in hits
        counts = self.caching_counts.get(rid, [0, 0])
        partial = self.caching_partial.pop(rid, None)
        if counts is None and not admission or rid not in live:
            return False
        if not self.cow:
            self._indexer_step(entries, rid, hits[rid][2] if admission else None, counts,
                               live[rid][INDEXER])
            return True
        tables = {rid: (live[rid][INDEXER], live[rid][self.groups - 1])}
        if copy is not None and not admission:  # the copy takes the partial tail's entries
            source = tables[rid][1][partial:partial + 1] if partial is not None else []
            if not source:
                return False
            entries.move(source[0], copy)
        hit_blocks = hits[rid][2:] if admission else None
        self._caching_step_blocks(entries, rid, hit_blocks, counts, tables)
        return True

    def _indexer_step(self, entries, rid, hit_blocks, counts, table) -> None:
        """A step's `cache_blocks` of the indexer alone (the plain profiles: no Mamba group,
        hashed per block): vLLM 0.33.0's `FullAttentionManager.cache_blocks(request,
        min(computed, tokens))`, from an admission's hit blocks (`num_cached_block` set to
        their count) or the request's cached count."""
        request, size = self.requests[rid], self.trace.block_size
        cached = len(hit_blocks) if hit_blocks is not None else counts[0]
        tokens = min(request.computed, len(request.tokens))
        cached = rule.full_attention(entries, table, cached, tokens, request.hashes(size),
                                     request.prompt, size, size, False)
        self.caching_counts[rid] = [cached, 0]


def _mapped(entries, convert):
    """A block's entries (None, one entry or a list of them) with each entry converted."""
    if entries is None:
        return None
    if isinstance(entries, list):
        return [convert(tuple(e)) for e in entries]
    return convert(tuple(entries))

