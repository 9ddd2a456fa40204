"""EAGLE's last-block drop beside a Mamba "align" group (`Trace.eagle`, vLLM's `use_eagle`
with lookahead hashes off: `disable_lookahead_block_hashes`), in the reduced mode (`align.py`).
No group is flagged `is_eagle_group` in these traces, so the coordinator flags every group
(`eagle_group_ids`), the Mamba group too, and sets the Mamba manager's
`drop_eagle_checkpoint_block`. What the drop changes, read in vllm 0.33.0 and modelled where the
mode reads it:

- the hit (`HybridKVCacheCoordinator.find_longest_cache_hit`, one pass in this simple hybrid):
  full attention is looked up one drop unit past the cap (`eagle_proof_margin`: the hash block,
  or the block where hashed per block) and drops one unit; the Mamba group's finder never drops
  and gets no margin: the latest cached state no deeper than full attention's after the drop
  (`oracle/kvmanager/align_hit.eagle_full_hit`); the connector lookup's per-group search
  (`find_longest_cache_hit_per_group`) likewise for full attention, its shared-prefix boundary
  full attention's hit after the drop;
- the Mamba checkpoint (`get_mamba_prefill_checkpoint_position` with the drop): a chunk's end
  cut to the hash grid less one hash block, no token held back
  (`mamba_align.checkpoint_position`), which the exact counts, the kept states and the worker's
  writes all read;
- under retention 0 the two replay boundaries `replay_boundaries(use_eagle=True)` gives, and the
  scheduler's last cacheable position a block lower (`align_retention.replay_state_ends`);
- the groups' cacheable tokens (`get_num_cacheable_tokens`): with one block size, what the
  step computed less multi-module MTP's k - 1 re-prefillable tokens (`held_back`, `cacheable`;
  none with a prefill lookahead of at most 1). With k >= 2 (since 2026-12-07) a state at a
  block boundary is cached and offered by the step that finalizes it, while it still reads it
  (`finalized_end`: retention's replay and junction states; the boundary offers up to the
  finalized tokens), the partial tail a step keys sits at its cacheable tokens and pends a
  copy-on-write (`held_tail_keyed`), and with partial hits chunks stop at the prompt's tail
  boundary as vLLM's scheduler stops them (`tail_cut`).
With a KV connector's ops since 2026-12-07 (`align_external_eagle.py`; with k >= 2 there too:
`align_external_mtp.py`), not k past the hash unit (refused:
vLLM's scheduler stalls or its manager asserts there; docs/upstream-vllm.md, "Multi-module MTP
with EAGLE's drop beside the group").
"""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.boundary import _entries
from kvfuzz.oracle.kvmanager import align_caching, mamba_align

HIT = "EAGLE's drop: a hit beside the Mamba group"
MOVED = "EAGLE's drop: a Mamba checkpoint at its replay boundary"
EVENTS = (HIT, MOVED)


def events(trace, hit: int | None, computed: int, checkpoint: bool) -> tuple[str, ...]:
    """The events of an allocation made under EAGLE's drop: a hit of `hit` tokens (None: no
    admission), and a checkpoint taken at a step to `computed` tokens that the drop moved."""
    if not trace.eagle:
        return ()
    moved = checkpoint and mamba_align.checkpoint_position(
        computed, trace.hash_size, eagle=True) != mamba_align.checkpoint_position(
        computed, trace.hash_size)
    return (HIT,) * bool(hit) + (MOVED,) * moved


def held_back(trace) -> int:
    """Multi-module MTP's re-prefillable tokens (`num_reprefillable_tokens`, its prefill
    lookahead k less one): with EAGLE's drop every group here holds them back from caching
    (`get_num_cacheable_tokens`); without the drop none is (the released rule)."""
    # (getattr: the rules' plain-data tests pass namespaces without the field)
    return max(0, getattr(trace, "prefill_lookahead", 0) - 1) if trace.eagle else 0


def cacheable(trace, computed: int) -> int:
    """The tokens a step to `computed` tokens asks each group to cache (`get_num_cacheable_tokens`,
    `oracle/kvmanager/align_caching.cacheable`): with k - 1 held back, a state written at a
    block boundary is cached (and offered) only by a later step that finalizes it."""
    return align_caching.cacheable(computed, trace.block_size, trace.hash_size, trace.eagle,
                                   held_back(trace))


def tail_cut(trace, request, start: int, new: int) -> int:
    """A prefill chunk of `new` tokens from `start`, with k - 1 tokens held back and partial
    hits (hashed below the block), cut at the prompt's tail boundary P // h * h - h as vLLM's
    scheduler cuts every chunk there (`_mamba_block_aligned_split`'s `tail_boundary` stop,
    unless the chunk exports its state through a prefill checkpoint block or the last cacheable
    position is no lower). A chunk stepping over that boundary is a call the scheduler never
    makes under these settings, and the release's manager breaks on it (a partial tail keyed
    by a decode's `cache_blocks` on a block `remove_skipped_blocks` frees before its
    copy-on-write: `req_blocks[block_idx] is source_block`; docs/upstream-vllm.md)."""
    size, hashed = trace.block_size, trace.hash_size
    prefill_end = max(request.prompt, len(request.tokens) - 1)
    if not held_back(trace) or hashed >= size or start >= prefill_end or \
            mamba_align.checkpoint_index(start, start + new, prefill_end, size, hashed,
                                         trace.mamba_checkpoint, eagle=True) is not None:
        return new
    tail = mamba_align.checkpoint_position(request.prompt, hashed, eagle=True)
    last = max(len(request.tokens) // size * size - size, 0)
    return tail - start if last < tail < request.prompt and start < tail < start + new else new


def cached_blocks(trace, request) -> int:
    """The boundary up to which a step has cached the request's full blocks: its cacheable
    tokens (k - 1 held back) cut to the block."""
    tokens = cacheable(trace, request.computed)
    return tokens - tokens % trace.block_size


def finalized_end(trace, before: int, computed: int, ends) -> int | None:
    """With k - 1 tokens held back, the state among `ends` that a step from `before` to
    `computed` tokens finalizes, or None: the state it read (written by the step before, which
    ended there, and still in the table), once the cacheable tokens reach it. A state a
    retention rule keeps is cached then, not by the step that wrote it; one a step left behind
    unfinalized has left the table by then (not judged)."""
    if before in ends and cacheable(trace, before) < before <= cacheable(trace, computed):
        return before
    return None


def held_tail_keyed(trace, request, table: list, before: list, after: list) -> bool:
    """With k - 1 tokens held back, whether the step just made keyed a partial tail at its
    cacheable tokens c (inside a block, on the hash grid: `_cache_partial_tail_block` keys the
    prompt's tail boundary there) on the block of its Mamba table at column cdiv(c, b) - 1, new
    in this op (a block already keyed there records no copy): the release then records it in
    `_partial_hit_reqs`, and the next step's count holds its copy-on-write block."""
    size, hashed, tokens = trace.block_size, trace.hash_size, cacheable(trace, request.computed)
    if not held_back(trace) or not tokens or not tokens % size or tokens % hashed:
        return False
    units, column = request.hashes(hashed, trace.hash_lookahead), -(-tokens // size) - 1
    if tokens // hashed > len(units) or column >= len(table) or not table[column]:
        return False
    key = mamba_align.hit_key(units, tokens, hashed)
    return key in _entries(after, table[column]) and key not in _entries(before, table[column])
