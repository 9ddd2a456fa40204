"""Which entries an op adds to the prefix cache beside a Mamba "align" group (vLLM 0.33.0),
as a function of the cache entries before the op and what the op did: each block's entries,
group 0 full attention and group 1 the Mamba group (the trace's ids), each entry a request's
hash unit (one per `hash_size` tokens, chained) with its group. Pure: the reduced mode
(`fuzz/kvmanager/align_caching.py`) says which calls an op made. Facts read in the release:

- `BlockPool._insert_block_hash`: nothing when the block already holds the key (as its primary
  or a further entry); else the key becomes the block's primary (with its token count) if it
  has none, a further entry if it has one;
- `BlockPool.cache_full_blocks(start, end)`: each non-null, unmasked block of the table in
  [start, end) keyed under the request's hash of its last unit; a block already keyed (a
  partial entry promoted) loses every entry first;
- `BlockPool.cache_partial_block(block, tokens)`: the key of the unit ending at `tokens`; with
  `replace_existing_hashes` every entry of the block goes first; else where the block is not
  already keyed so and its primary covers fewer tokens, every entry goes first;
- `HybridKVCacheCoordinator.get_num_cacheable_tokens` (`cacheable`): what each group is asked
  to cache of the tokens `allocate_slots` passes, min(computed + new, the request's tokens);
- `SingleTypeKVCacheManager.cache_blocks`: the full blocks from the request's cached count to
  min(tokens, hashed tokens) // block (nothing where that is not past the count), then the
  count is that; `reachable_block_mask` keeps them all but for a Mamba group under sparse
  retention (`mamba_mask`);
- `FullAttentionManager._cache_partial_tail_block` (hashed per fewer tokens than a block): the
  prompt's last hash boundary (below its last token, or at it with EAGLE) keyed on the block
  it ends inside, once the step reached it (every step: an entry it holds already adds
  nothing, one a promotion dropped comes back);
- `MambaManager._cache_partial_tail_block` (`mamba_partial`): a step with a prefill checkpoint
  re-keys (or, transient, evicts) its checkpoint block; without one, a step ending on the
  prompt's checkpoint boundary (or the shared-prefix junction) keys the block holding that
  state, and where that is inside a block the request's cached count becomes that block's
  index.
"""

from __future__ import annotations

from kvfuzz.oracle.kvmanager.hybrid import cdiv

FULL, MAMBA = 0, 1


class Entries:
    """Each block's cache entries, its primary first; `tokens(key)` the tokens a key covers."""

    def __init__(self, keys, tokens) -> None:
        self.blocks: dict[int, list] = {}
        for block, entries in enumerate(keys):
            if entries is not None:
                self.blocks[block] = [tuple(e) for e in entries] if isinstance(
                    entries, list) else [tuple(entries)]
        self.tokens = tokens
        self.changed = False  # (whether anything was dropped or inserted)
        self.partial_tail = None  # the table index of a Mamba partial tail keyed, if any

    def get(self, block: int) -> list:
        return self.blocks.get(block, [])

    def drop(self, block: int) -> None:
        if self.blocks.pop(block, None):
            self.changed = True

    def insert(self, block: int, key: tuple) -> None:
        held = self.blocks.setdefault(block, [])
        if key not in held:
            held.append(key)
            self.changed = True

    def move(self, source: int, target: int) -> None:
        """`BlockPool.move_block_hashes`: the source's entries, its primary first, re-pointed
        to the target (a running request's copy-on-write of its partial tail)."""
        held = self.blocks.pop(source, [])
        self.blocks.pop(target, None)
        if held:
            self.blocks[target] = held
            self.changed = True

    def primary_tokens(self, block: int) -> int | None:
        held = self.blocks.get(block)
        return self.tokens(held[0]) if held else None

    def as_keys(self, size: int) -> list:
        """In the pool read's shape (None, one entry, or a list: the primary, then the rest
        sorted)."""
        out: list = [None] * size
        for block, held in self.blocks.items():
            if held and block < size:
                out[block] = held[0] if len(held) == 1 else [held[0], *sorted(held[1:])]
        return out


def external_counts(hit: tuple[int, int], computed: int, block_size: int) -> list[int]:
    """Each group's cached count after an admission with external tokens (its local hit
    block-aligned): `add_local_computed_blocks` sets it to the table's length then, the skipped
    blocks' nulls and the hit blocks past them (full attention skips none: its `hit[0]` hit
    blocks; the Mamba group skips `computed` - 1 tokens, c the local and external ones:
    max(its `hit[1]`, (c - 1) // block)); `allocate_external_computed_blocks` leaves it."""
    return [hit[0], max(hit[1], (computed - 1) // block_size)]


def cacheable(tokens: int, block_size: int, hash_size: int, eagle: bool,
              reprefillable: int = 0) -> int:
    """`HybridKVCacheCoordinator.get_num_cacheable_tokens`: the tokens a group caches of the
    `tokens` an allocation passes, cut to the scheduler block (the block here) unless partial
    hash hits are on (hashed per fewer tokens than a block); with EAGLE's drop (every group
    here) at most one block past the finalized tokens (`reprefillable` held back, MTP's
    prefill lookahead less one) cut so."""
    def aligned(count: int) -> int:
        return count if hash_size < block_size else count // block_size * block_size
    if eagle and aligned(tokens) > 0:
        final = max(0, tokens - reprefillable)
        return min(final, aligned(final) + block_size)
    return aligned(tokens)


def cache_full_blocks(entries: Entries, table, start: int, end: int, units, block_size: int,
                      hash_size: int, group: int, mask=None) -> None:
    per = block_size // hash_size
    for index in range(start, min(end, len(table))):
        block = table[index]
        if not block or (mask is not None and not mask[index - start]):
            continue
        key = (units[(index + 1) * per - 1], group)
        if entries.get(block) and key not in entries.get(block)[:1]:
            entries.drop(block)  # (a partial entry promoted: every entry goes first)
        entries.insert(block, key)


def cache_partial_block(entries: Entries, block: int, tokens: int, units, hash_size: int,
                        group: int, replace: bool = False) -> tuple | None:
    if not block or not 0 < tokens // hash_size <= len(units):
        return None  # (no unit ends there: the release asserts, so nothing is predicted keyed)
    key = (units[tokens // hash_size - 1], group)
    held = entries.get(block)
    if replace:
        entries.drop(block)
    elif key not in held and held and entries.primary_tokens(block) < tokens:
        entries.drop(block)
    entries.insert(block, key)
    return key


def full_blocks_end(tokens: int, units, block_size: int, hash_size: int) -> int:
    """`num_full_blocks`: min(tokens, hashed tokens) // block."""
    return min(tokens, len(units) * hash_size) // block_size


def full_attention(entries: Entries, table, cached: int, tokens: int, units, prompt: int,
                   block_size: int, hash_size: int, eagle: bool) -> int:
    """`FullAttentionManager.cache_blocks(request, tokens)`; the cached count after it."""
    end = full_blocks_end(tokens, units, block_size, hash_size)
    if cached < end:
        cache_full_blocks(entries, table, cached, end, units, block_size, hash_size, FULL)
        cached = end
    if block_size != hash_size:
        limit = prompt if eagle else prompt - 1
        boundary = min(limit // hash_size, len(units)) * hash_size
        if 0 < boundary <= tokens and boundary % block_size and \
                boundary // block_size < len(table):
            cache_partial_block(entries, table[boundary // block_size], boundary, units,
                                hash_size, FULL)
    return cached


def mamba_mask(start: int, end: int, block_size: int, hash_size: int, retention,
               boundaries) -> list[bool] | None:
    """`MambaManager.reachable_block_mask` (the alignment the hash block): None (every block)
    but under sparse retention, where only each segment's last block and each reachable
    boundary's state block are kept."""
    if retention is None:
        return None
    mask = [False] * (end - start)
    if retention:
        per = retention // block_size
        if per <= 1:
            return None
        first = (start + per) // per * per - 1
        for index in range(first - start, len(mask), per):
            mask[index] = True
    for boundary in boundaries:
        index = boundary // hash_size * hash_size // block_size - 1
        if start <= index < end:
            mask[index - start] = True
    return mask


def replay_boundaries(prompt: int, block_size: int, eagle: bool) -> tuple[int, ...]:
    """`replay_boundaries` (the scheduler block the Mamba block here)."""
    if not eagle:
        return (prompt - 1,)
    resend, extension = (prompt - 1) // block_size * block_size, prompt // block_size * block_size
    return tuple(sorted({max(resend - block_size, 0), max(extension - block_size, 0)}))


def mamba(entries: Entries, table, cached: int, tokens: int, units, prompt: int, computed: int,
          block_size: int, hash_size: int, retention, eagle: bool, checkpoint, prompt_position:
          int, junction: int = 0, junction_on: bool = False) -> int:
    """`MambaManager.cache_blocks(request, tokens)` in align mode; the cached count after it.
    `checkpoint`: (position, index) of the step's prefill checkpoint, or None;
    `prompt_position`: the prompt's checkpoint boundary (`get_mamba_prefill_checkpoint_position`
    of the prompt); `junction`: the request's shared-prefix boundary (0: none), `junction_on`
    the setting; `computed`: the request's computed tokens before the step (vLLM's
    `num_computed_tokens` while `allocate_slots` runs)."""
    end = full_blocks_end(tokens, units, block_size, hash_size)
    if cached < end:
        bounds = [*replay_boundaries(prompt, block_size, eagle)]
        if junction:
            bounds.append(junction)
            if eagle:
                bounds.append(junction - block_size)
        mask = mamba_mask(cached, end, block_size, hash_size, retention, bounds)
        cache_full_blocks(entries, table, cached, end, units, block_size, hash_size, MAMBA, mask)
        cached = end
    return _mamba_partial(entries, table, cached, tokens, units, prompt, computed, block_size,
                          hash_size, retention, checkpoint, prompt_position, junction,
                          junction_on)


def _mamba_partial(entries, table, cached, tokens, units, prompt, computed, block_size,
                   hash_size, retention, checkpoint, prompt_position, junction,
                   junction_on) -> int:
    if checkpoint is not None:
        position, index = checkpoint
        block = table[index] if index < len(table) else 0
        retained = False
        if position % block_size == 0:
            mask = mamba_mask(position // block_size - 1, position // block_size, block_size,
                              hash_size, retention, ())
            retained = mask is None or mask[0]
        if position != prompt_position and not retained and position != junction:
            entries.drop(block)  # (transient: `_maybe_evict_cached_block`)
            return cached
        if block and entries.primary_tokens(block) == position:
            return cached
        cache_partial_block(entries, block, position, units, hash_size, MAMBA, replace=True)
        return cached
    if tokens <= 0 or tokens % hash_size:
        return cached
    if tokens != prompt_position and not (junction_on and tokens == junction
                                          and computed < tokens <= prompt):
        return cached
    index = cdiv(tokens, block_size) - 1
    if index >= len(table) or not table[index]:
        return cached
    if entries.primary_tokens(table[index]) == tokens:
        return cached
    cache_partial_block(entries, table[index], tokens, units, hash_size, MAMBA)
    if tokens % block_size:  # (the next allocation copies it: `_partial_hit_reqs`)
        entries.partial_tail = index
        return index
    return cached
