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
- a request freed drops its offers not yet taken.

So, with what the caller knows and the pool shows (no model of Mamba's checkpoints):
- sound: every entry is of the request this op stepped, of the Mamba group (1), a block that
  is not the null block, with a boundary that is a multiple of the hash block, no past the
  request's computed tokens, and the block is cached under the request's hash of exactly
  that many tokens in the Mamba group (a connector offloads it under that hash);
- complete: every block that gained, in this op, a Mamba entry under the request's hash of a
  block boundary (a full state block cached) is offered with that boundary.
A manager that offers nothing, the wrong block, boundary or group fails one of these
(`tests/kvmanager/test_boundary.py`)."""

from __future__ import annotations

from kvfuzz.oracle.kvmanager.mamba_align import hit_key

MAMBA_GROUP = 1


def offload_problems(offloads, rid, request, before: list, after: list, block_size: int,
                     hash_size: int) -> list[tuple[str, str]]:
    """What is wrong with one op's offers (`offloads`: (rid, group, block, tokens) entries, as
    the driver reads them; None: the manager has no such method) after an op that stepped
    request `rid` (`request`, the lock step's, its tokens computed after the op; None for an op
    of no request); `before`/`after`: each block's cache entries at the last read and now."""
    if offloads is None:
        return []
    units = request.hashes(hash_size) if request is not None else []
    for entry in offloads:
        wrong = _entry_problem(entry, rid, request, units, after, hash_size)
        if wrong:
            return [("boundary offload", f"take_boundary_state_offloads: {short_entry(entry)} "
                                         f"{wrong}")]
    if request is None:
        return []
    offered = {(block, tokens) for _, _, block, tokens in offloads}
    boundaries = {hit_key(units, tokens, hash_size): tokens
                  for tokens in range(block_size, request.computed + 1, block_size)
                  if tokens // hash_size <= len(units)}
    for block in range(1, len(after)):
        gained = set(_entries(after, block)) - set(_entries(before, block))
        for key in gained:
            tokens = boundaries.get(key)
            if tokens is not None and (block, tokens) not in offered:
                return [("boundary offload", f"take_boundary_state_offloads: block {block} "
                                             f"was cached this op as r{rid}'s Mamba state at "
                                             f"{tokens} tokens (a block boundary), not offered: "
                                             f"{[short_entry(e) for e in offloads][:4]}")]
    return []


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
