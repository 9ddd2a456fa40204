"""What a block pool may declare (`Implementation.preconditions`): that its callers never free a
block more times than it has references (vLLM's `BlockPool` declares it: its `free_blocks` does
not check; docs/upstream-vllm.md, "A block twice in one free_blocks call"), and that it has no
`unpin_blocks` (read from an earlier release's class). Its generator then leaves those ops out,
and a trace that has one is outside its contract. Standard library only.
"""

from __future__ import annotations

from kvfuzz.strategies.blockpool.trace import (Cache, CachePartial, DoubleFree, Move, Trace, Unpin,
                                               UnpinIds)

NO_DOUBLE_FREE = ("free_blocks is never given a block more times than it has references "
                  "(vLLM's pool does not check: a double free is its caller's bug, #42571)")
# What a pool class may lack (read from the class: fuzz/blockpool/target.py).
NO_UNPIN = "no unpin_blocks (an earlier vLLM release): a finished request's blocks are freed"
# What an earlier release's pool lacks, read from its class (signature and attribute probes):
# vLLM 0.25-0.29's `cache_partial_block` takes no `replace_existing_hashes`, and asserts an
# entry strictly inside a block (`num_tokens % block_size != 0`); its constructor no
# `num_hash_lookahead_tokens`; 0.25's pool has no `move_block_hashes` and no
# `emit_cached_block_events`.
NO_REPLACE = ("cache_partial_block takes no replace_existing_hashes (vLLM before 0.30): partial "
              "entries are never replacing, and strictly inside a block")
# vLLM 0.30 and 0.31 take `replace_existing_hashes` but still assert a non-replacing entry
# strictly inside a block (`assert replace_existing_hashes or (block_size > hash_block_size and
# num_tokens % block_size != 0)`); 0.32 drops the assertion.
NO_BOUNDARY = ("cache_partial_block asserts a non-replacing entry strictly inside a block "
               "(vLLM 0.30, 0.31): such an entry never lands on a block boundary")
NO_LOOKAHEAD = "no num_hash_lookahead_tokens (vLLM before 0.30): no lookahead hashing"
NO_MOVE = "no move_block_hashes (vLLM 0.25): no copy-on-write of cached blocks"
NO_REPORT = "no emit_cached_block_events (vLLM 0.25): hits are not reported as KV events"
# vLLM 0.20 keys a block of several hash units by the units' hashes joined (its
# `BlockHashListWithBlockSize`); 0.25 on, by its last unit's, which chains over the whole prefix
# (what kvfuzz models). Both name one prefix; only the second is kvfuzz's 8-byte hash.
NO_SCALE = ("keys a block of several hash units by their hashes joined (vLLM 0.20): a block is "
            "one hash unit (hash_block_size equals the block size)")
NO_MASK = "cache_full_blocks takes no block_mask (vLLM 0.20): every full block is cached"
LACKING = (NO_REPLACE, NO_BOUNDARY, NO_LOOKAHEAD, NO_MOVE, NO_REPORT, NO_SCALE, NO_MASK)
# What an outside class may declare, by name (`__kvfuzz__`, or `--impl path@name`).
DECLARABLE = {"no_double_free": NO_DOUBLE_FREE}


def double_frees_allowed(preconditions) -> bool:
    return NO_DOUBLE_FREE not in preconditions


def unpins_allowed(preconditions) -> bool:
    return NO_UNPIN not in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    """The preconditions `trace` breaks (empty: the pool supports it)."""
    found = [text for text in LACKING if text in preconditions and _needs(trace, text)]
    if not double_frees_allowed(preconditions) and \
            any(isinstance(op, DoubleFree) for op in trace.ops):
        found.append(NO_DOUBLE_FREE)
    if not unpins_allowed(preconditions) and \
            any(isinstance(op, (Unpin, UnpinIds)) for op in trace.ops):
        found.append("unpins blocks, and the class has no unpin_blocks")
    return found


def _needs(trace: Trace, lacking: str) -> bool:
    """Whether `trace` asks what a pool lacking `lacking` does not have."""
    if lacking == NO_REPLACE:
        return any(isinstance(op, CachePartial) and (op.replace or op.units % trace.scale == 0)
                   for op in trace.ops)
    if lacking == NO_BOUNDARY:
        return any(isinstance(op, CachePartial) and not op.replace and
                   op.units % trace.scale == 0 for op in trace.ops)
    if lacking == NO_MOVE:
        return any(isinstance(op, Move) for op in trace.ops)
    if lacking == NO_SCALE:
        return trace.scale > 1
    if lacking == NO_MASK:
        return any(isinstance(op, Cache) and op.skip for op in trace.ops)
    return bool(trace.lookahead) if lacking == NO_LOOKAHEAD else trace.report
