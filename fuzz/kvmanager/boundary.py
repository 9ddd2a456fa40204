"""The boundary-state hand-offs of a Mamba group in "align" mode, checked in the reduced mode
(`fuzz/kvmanager/align.py`) after every op: `KVCacheManager.take_boundary_state_offloads()`,
which a scheduler with a KV connector drains every step (vllm 0.33.0: `scheduler.py`, the
connector's offload of Mamba states). Facts read in the released source
(`MambaManager.cache_blocks` and `allocate_new_blocks`, `kv_cache_manager.py` ~line 880):

- each entry is (request, group, block, boundary tokens): a state a connector may offload so
  that a later request hits that prefix; it reads the block named, never a table position;
- when a step caches a full block of the Mamba group (a state at a block boundary), that block
  is offered with its boundary; a partial tail's copy-on-write copy is offered with the tail's
  boundary (the copy takes its source's cache entries);
- a request freed drops its offers not yet taken;
- as a request finishes (a KV producer's scheduler asks, before the free:
  `finalize_partial_tail_offloads`), the partial tail its last step cached, if it computed
  nothing since, is handed off directly: (group, its table's last block, its computed tokens).

So, with what the caller knows and the pool shows (no model of Mamba's checkpoints):
- sound: every entry is of the request this op stepped, of the Mamba group (1), a block that
  is not the null block, with a boundary that is a multiple of the hash block, no past the
  request's computed tokens, and the block is cached under the request's hash of exactly
  that many tokens in the Mamba group (a connector offloads it under that hash);
- complete: every block that gained, in this op, a Mamba entry under the request's hash of a
  block boundary past what the request had cached before the op (a full state block cached
  for the first time: `cache_blocks` offers each once per admission) is offered with that
  boundary;
- the finished request's tail: exactly its table's last block at its computed tokens when its
  last step left that block cached under its hash of them, inside a block (`tail_keyed`), else
  nothing (`tail_problems`).
A manager that offers nothing, the wrong block, boundary or group fails one of these
(`tests/kvmanager/test_boundary.py`)."""

from __future__ import annotations

from kvfuzz.oracle.kvmanager.mamba_align import hit_key

MAMBA_GROUP = 1  # the trace's id (the manager's 0 where it comes first: `align_order.py`)


def offload_problems(offloads, rid, request, before: list, after: list, block_size: int,
                     hash_size: int, since: int = 0, evicted_tail=None,
                     table=(), lookahead: int = 0, held: int = 0) -> list[tuple[str, str]]:
    """What is wrong with one op's offers (`offloads`: (rid, group, block, tokens) entries, as
    the driver reads them; None: the manager has no such method) after an op that stepped
    request `rid` (`request`, the lock step's, its tokens computed after the op; None for an op
    of no request); `before`/`after`: each block's cache entries at the last read and now;
    `since`: the boundary up to which the request's blocks were cached before this op (its
    computed tokens at its last step, cut to the block, or its hit): only a boundary past it is
    expected offered. (A state block cached before, whose entry `evict_blocks` dropped, is keyed
    again by the partial-tail path when the prompt's last hash boundary is that block's end, and
    the release does not offer it again: `mamba align` trace 476, op 154.)
    `evicted_tail`: in an op that took copy-on-write copies, the tokens at which the request's
    step before cached its partial tail (else None). Its copy is offered at that boundary even
    when `evict_blocks` dropped the tail's entry in between: `move_block_hashes` then moves
    nothing, so the copy, which holds the right state, is cached under no hash (a connector keys
    the offload by the request's hash, or drops a block with none: nothing wrong is stored;
    `mamba align` traces 2268 and 2306, docs/upstream-vllm.md). Only such a block, under no
    entry at all and in none of the request's Mamba table `table`, is let through.
    `held`: tokens a step holds back from caching (multi-module MTP with EAGLE's drop,
    `align_eagle.held_back`): a boundary past the finalized tokens is not offered yet (the
    prefill checkpoint may key it, by the partial-tail path, which offers nothing)."""
    if offloads is None:
        return []
    units = request.hashes(hash_size, lookahead) if request is not None else []
    for entry in offloads:
        wrong = _entry_problem(entry, rid, request, units, after, hash_size)
        if wrong and _evicted_tail_copy(entry, after, block_size, evicted_tail, table):
            continue
        if wrong:
            return [("boundary offload", f"take_boundary_state_offloads: {short_entry(entry)} "
                                         f"{wrong}")]
    if request is None:
        return []
    offered = {(block, tokens) for _, _, block, tokens in offloads}
    boundaries = {hit_key(units, tokens, hash_size): tokens
                  for tokens in range(since - since % block_size + block_size,
                                      request.computed - held + 1, block_size)
                  if tokens // hash_size <= len(units)}
    for block in range(1, len(after)):
        gained = set(_entries(after, block)) - set(_entries(before, block))
        for key in gained:
            tokens = boundaries.get(key)
            if tokens is not None and (block, tokens) not in offered and \
                    not _checkpoint_below(block, tokens, table, block_size, lookahead or held):
                return [("boundary offload", f"take_boundary_state_offloads: block {block} "
                                             f"was cached this op as r{rid}'s Mamba state at "
                                             f"{tokens} tokens (a block boundary), not offered: "
                                             f"{[short_entry(e) for e in offloads][:4]}")]
    return []


def _checkpoint_below(block: int, tokens: int, table, block_size: int, lookahead: int) -> bool:
    """Under lookahead hashing, whether `block` is no state block `cache_blocks` caches at
    `tokens` (the request's Mamba table holds another at column tokens // b - 1): a prefill
    checkpoint's block keyed at a block boundary a block below its own column (the checkpoint
    moves back by the lookahead, `get_mamba_prefill_checkpoint_position`), which the release
    keys and does not offer. (No connector runs with lookahead hashes: vLLM keeps the legacy
    hashes with one; without lookahead such a checkpoint is the column's own boundary.) Likewise
    with tokens held back (multi-module MTP with EAGLE's drop, passed as `lookahead`): the
    checkpoint keyed where the full-block path, short of the held tokens, left its column."""
    column = tokens // block_size - 1
    return bool(lookahead) and not (0 <= column < len(table) and table[column] == block)


def tail_keyed(request, table: list[int], keys: list, block_size: int, hash_size: int,
               lookahead: int = 0) -> bool:
    """Whether the step just made cached the request's partial tail: the last block of its
    Mamba table (the state it wrote) cached under its hash of exactly its computed tokens, a
    position inside a block on the hash grid (what the released `_cache_partial_tail_block`
    keys, and registers the request as that tail's producer)."""
    computed, last = request.computed, (table[-1] if table else 0)
    if not last or not computed % block_size or computed % hash_size:
        return False
    units = request.hashes(hash_size, lookahead)  # (`lookahead`: the trace's hash_lookahead)
    return computed // hash_size <= len(units) and \
        hit_key(units, computed, hash_size) in _entries(keys, last)


def tail_problems(tail, rid, request, table: list[int], keyed: bool, block_size: int,
                  hash_size: int) -> list[tuple[str, str]]:
    """What is wrong with `finalize_partial_tail_offloads(request)` as request `rid` finishes
    (`tail`: (group, block, tokens) entries; None: the manager has no such method), given its
    Mamba table `table` and whether its last step cached its partial tail (`keyed`, from
    `tail_keyed` after that step: an `evict_blocks` since drops the entry, not the state in the
    block, so it still counts). The released rule: a request whose last step cached its partial
    tail hands that state's block off, once: the last block of its table, at its computed
    tokens; any other request nothing."""
    if tail is None:
        return []
    computed = request.computed
    last = table[-1] if table else 0
    for entry in tail:
        try:
            group, block, tokens = entry
        except (TypeError, ValueError):
            wrong = "is not (group, block, boundary tokens)"
        else:
            wrong = (f"names group {group}: only the Mamba group ({MAMBA_GROUP}) hands states "
                     f"off" if group != MAMBA_GROUP else
                     f"has a boundary of {tokens} tokens: expected the {computed} computed, "
                     f"inside a block of {block_size}, a multiple of {hash_size}"
                     if tokens != computed or not tokens % block_size or tokens % hash_size else
                     f"names block {block}: expected the last of r{rid}'s Mamba table "
                     f"{short_list(table)} (the state of its last token)"
                     if block != last or not block else None)
        if wrong:
            return [("boundary offload", f"finalize_partial_tail_offloads(r{rid}): "
                                         f"{short_list(entry)} {wrong}")]
    expected = [(MAMBA_GROUP, last, computed)] if keyed else []
    if [tuple(entry) for entry in tail] != expected:
        return [("boundary offload", f"finalize_partial_tail_offloads(r{rid}): expected "
                                     f"{expected or 'nothing'} (its last step "
                                     f"{'cached' if keyed else 'cached no'} partial tail at "
                                     f"its {computed} computed tokens), actual "
                                     f"{short_list(tail)}")]
    return []


def short_list(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _entry_problem(entry, rid, request, units, after, hash_size) -> str | None:
    try:
        owner, group, block, tokens = entry
    except (TypeError, ValueError):
        return "is not (request, group, block, boundary tokens)"
    if request is None or owner != rid:
        return f"is not of the request this op stepped ({'r%s' % rid if request else 'none'})"
    if group != MAMBA_GROUP:
        return f"names group {group}: only the Mamba group ({MAMBA_GROUP}) hands states off"
    if not 0 < block < len(after):
        return f"names block {block}: not a state block of the pool"
    if not 0 < tokens <= request.computed or tokens % hash_size:
        return (f"has a boundary of {tokens} tokens: expected a multiple of {hash_size} up to "
                f"the {request.computed} computed")
    if hit_key(units, tokens, hash_size) not in _entries(after, block):
        return (f"names block {block}, which is not cached under r{rid}'s hash of its first "
                f"{tokens} tokens in the Mamba group (what a connector would offload it as)")
    return None


def _evicted_tail_copy(entry, after, block_size: int, evicted_tail, table) -> bool:
    """Whether `entry` is the copy of a partial tail whose cache entry an eviction dropped:
    `offload_problems`'s `evicted_tail`."""
    if evicted_tail is None:
        return False
    try:
        _, _, block, tokens = entry
    except (TypeError, ValueError):
        return False
    return (tokens == evicted_tail and tokens % block_size != 0 and not _entries(after, block)
            and block not in table)


def _entries(keys: list, block: int) -> list:
    """A block's cache entries (hash, group) as a read of the pool's keys showed them."""
    entries = keys[block] if 0 <= block < len(keys) else None
    if entries is None:
        return []
    return [tuple(e) for e in entries] if isinstance(entries, list) else [tuple(entries)]


def short_entry(entry) -> str:
    try:
        owner, group, block, tokens = entry
        return f"(r{owner}, group {group}, block {block}, {tokens} tokens)"
    except (TypeError, ValueError):
        return repr(entry)[:80]
