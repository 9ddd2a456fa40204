"""Which blocks are cached, in the reduced mode of a Mamba "align" group (`align.py`): after
every op, the pool's cache entries (each block's) against those read after the op before, less
the entries of the blocks the op's pops evicted (the free queue's prediction,
`align_queue.py`), an eviction named or a reset, plus what the op's `cache_blocks` adds and
re-keys (`oracle/kvmanager/align_caching.py`, the request's tokens, hashes and tables after the
op, its cached counts per group tracked here as vLLM's `num_cached_block`).

Judged: an allocation (`allocate_slots` of a schedule or a decode, with tokens in flight too:
full attention's full blocks and prompt tail, the Mamba group's full blocks under its retention
mask, its prefill checkpoint re-keyed or evicted, the prompt's checkpoint boundary keyed; a
running request's copy-on-write of the partial tail its last step keyed moves that block's
entries to the copy, a block in no table, which the queue check predicts), a free (no entry
moves), an eviction, a reset; a KV connector's ops (`align_caching_external.py`: an
admission with external tokens, a load reported done or failed, the finish's
`remove_skipped_blocks`; the resumed step is an allocation here). Not judged, each counted
(`SKIPPED`): a trace the queue check does not judge (an engine's live session, the first
read), HiSparse (its own mode's: `hisparse_caching.py`, since 2026-12-07), and every other op
that changed an entry; a request with an op not judged is
not judged again until it is freed (its cached counts unknown). A settle's `cache_blocks` (an
output's, since 2026-12-07): `align_caching_settle.py` (not after a refused allocation)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.fuzz.kvmanager import align_caching_settle
from kvfuzz.fuzz.kvmanager.align_caching_external import EVENTS as EXTERNAL_EVENTS
from kvfuzz.fuzz.kvmanager.align_caching_external import AlignCachingExternal
from kvfuzz.oracle.kvmanager import align_caching as rule
from kvfuzz.oracle.kvmanager import mamba_align

JUDGED = "which blocks cached: predicted after an allocation"
SKIPPED = "which blocks cached: not judged (an op or configuration out of reach)"
EVENTS = (JUDGED, SKIPPED, *EXTERNAL_EVENTS, *align_caching_settle.EVENTS)


class AlignCaching(AlignCachingExternal, align_caching_settle.AlignCachingSettle):
    """A mixin of `AlignLockstep` ahead of `AlignQueueChecks`: it wraps `queue_problems`, which
    `_pool_problems` calls with the state read, to know the op and the blocks its pops
    evicted."""

    # (each a dict made at the trace's first read, in `queue_problems`: none shared by lock steps)
    caching_counts: dict | None = None  # rid -> [full attention's, the Mamba group's] cached
    caching_tokens: dict | None = None  # a hash unit -> the tokens it covers (every request's)
    caching_partial: dict | None = None  # rid -> the Mamba partial tail its last step keyed
    queue_copy = None           # a running request's copy-on-write copy (`align_queue.py`)

    def queue_problems(self, queue, ref, keys, tables):
        seen = (self.queue_op, self.queue_alloc, self.queue_copies)
        if self.queue_prev is None:  # (the trace's first read: a new pool)
            self.caching_counts, self.caching_tokens, self.caching_partial = {}, {}, {}
            self.caching_checkpoints = {}  # (`align_caching_settle.py`)
        self.queue_evicted = self.queue_copy = None
        problems = super().queue_problems(queue, ref, keys, tables)
        return problems + self.caching_problems(seen, keys, tables)

    def caching_problems(self, seen, keys, tables) -> list[tuple[str, str]]:
        op, alloc, copies = seen
        name = type(op).__name__ if op is not None else None
        rid = getattr(op, "rid", None)
        settled, self.settle_applied = self.settle_applied, None
        self.caching_noted(alloc)  # (vLLM's Mamba checkpoint, for a settle after it)
        if name in ("Finish", "Preempt") and rid is not None:
            self.caching_counts.pop(rid, None)  # (its counts go with its blocks)
            self.caching_partial.pop(rid, None)
        before, trace = self.keys, self.trace
        if self.queue_evicted is None or trace.hisparse:
            return self._caching_skipped(keys, before)
        entries = rule.Entries(before, self._caching_unit_tokens)
        if name == "Reset" and self.reset_done:
            entries = rule.Entries([None] * len(keys), self._caching_unit_tokens)
        elif name == "Evict":
            for block in self.evicted:
                entries.drop(block)
        elif (judged := self.caching_external(name, op, alloc, entries, tables)) is not None:
            if not judged:  # (a connector's op: `align_caching_external.py`)
                return self._caching_skipped(keys, before)
        elif alloc is not None and self.stepped == alloc[0] and alloc[1] in (True, False):
            if not self._caching_allocation(entries, alloc, copies, tables):
                self.caching_counts[alloc[0]] = None  # (unknown until it is freed)
                return self._caching_skipped(keys, before)
        elif name == "Settle" and settled == rid:  # its `cache_blocks` applied
            if not self.caching_settle(entries, rid, tables):  # (`align_caching_settle.py`)
                self.caching_counts[rid] = None  # (vLLM's moved: unknown until it is freed)
                return self._caching_skipped(keys, before)
        elif name not in ("Finish", "Preempt"):
            return self._caching_skipped(keys, before)
        if keys == before and not entries.changed:
            return []
        what = map_difference(entries.as_keys(len(keys)), keys, before)
        if what is None:
            return []
        where = f"{name.lower()}(r{rid})" if rid is not None else str(name).lower()
        return [("which blocks cached", f"after {where}: {what}")]

    def _caching_skipped(self, keys, before) -> list:
        if keys != before:  # (an op that changed no entry needs no judging)
            self.count(SKIPPED)
        return []

    def _caching_unit_tokens(self, key) -> int:
        return self.caching_tokens.get(key[0], 0)

    def _caching_allocation(self, entries, alloc, copies, tables) -> bool:
        """Apply an allocation's pops, a running request's copy-on-write (its partial tail's
        entries moved to the copy) and `cache_blocks` to `entries`; False where it is not
        judged (counts unknown)."""
        rid, admission = alloc[0], alloc[1]
        counts = self.caching_counts.get(rid, [0, 0])
        partial = self.caching_partial.pop(rid, None)  # (this step's allocation copies it)
        if counts is None and not admission:
            return False
        for block in self.queue_evicted:
            entries.drop(block)
        if copies and not admission:  # the copy takes the partial tail's entries
            source = tables[rid][1][partial:partial + 1] if partial is not None else []
            if not source or self.queue_copy is None:
                return False
            entries.move(source[0], self.queue_copy)  # (a running table is append-only)
        hit_blocks = self.hit_blocks if admission else None
        self._caching_step_blocks(entries, rid, hit_blocks, counts, tables)
        self.count(JUDGED)
        return True

    def _caching_step_blocks(self, entries, rid, hit_blocks, counts, tables) -> None:
        """A step's `cache_blocks` at its tokens (as a load's and a settle's: below): an
        admission's (`hit_blocks`, each group's hit, not None) counts from its hit, the cdiv
        or the floor of a hit inside a block; a running request's its `counts`. Shared with
        HiSparse's device pool (`hisparse_caching.py`)."""
        request, size = self.requests[rid], self.trace.block_size
        computed = self.read_from[rid]
        if hit_blocks is not None:
            counts = [computed // size if len(blocks) and computed % size else len(blocks)
                      for blocks in hit_blocks]
            computed = 0
        self.caching_counts[rid] = self._caching_cache_blocks(
            entries, rid, counts, min(request.computed, len(request.tokens)), computed,
            self.caching_checkpoint(rid, request), tables)

    def _caching_cache_blocks(self, entries, rid, counts, tokens, computed, checkpoint,
                              tables) -> list:
        """`cache_blocks(request, tokens)` from `counts` (each group's cached count), the
        request's computed tokens `computed` while it runs and `checkpoint` vLLM's Mamba
        checkpoint (position, table index) or None; the counts after it. Shared by an
        allocation, a connector's admission and load (`align_caching_external.py`) and a
        settle (`align_caching_settle.py`)."""
        request, trace = self.requests[rid], self.trace
        size, hashed = trace.block_size, trace.hash_size
        units = request.hashes(hashed, trace.hash_lookahead)
        for index, unit in enumerate(units):
            self.caching_tokens.setdefault(unit, (index + 1) * hashed)
        full, mamba = tables[rid]
        tokens = rule.cacheable(tokens, size, hashed, trace.eagle,
                                max(0, trace.prefill_lookahead - 1))
        counts[0] = rule.full_attention(entries, full, counts[0], tokens, units, request.prompt,
                                        size, hashed, trace.eagle)
        counts[1] = rule.mamba(
            entries, mamba, counts[1], tokens, units, request.prompt, computed, size, hashed,
            trace.retention, trace.eagle, checkpoint,
            mamba_align.checkpoint_position(request.prompt, hashed, trace.hash_lookahead,
                                            trace.eagle),
            request.boundary, trace.mamba_shared_prefix)
        if entries.partial_tail is not None:
            self.caching_partial[rid] = entries.partial_tail
        return counts


def map_difference(expected: list, actual: list, before: list) -> str | None:
    """The blocks (past the null block) whose entries differ from the prediction, the first
    three with what they held before the op; None where every block agrees."""
    wrong = [b for b in range(1, len(actual)) if comparable(expected[b]) != comparable(actual[b])]
    if not wrong:
        return None
    return "; ".join(f"block {b}: expected {short(expected[b])}, actual {short(actual[b])} "
                     f"(before {short(before[b])})" for b in wrong[:3])


def comparable(entries):
    """A block's entries as a comparable value: None, or (primary, the rest sorted)."""
    if entries is None:
        return None
    if isinstance(entries, list):
        return (tuple(entries[0]), tuple(sorted(tuple(e) for e in entries[1:])))
    return (tuple(entries), ())
