"""The length of a prefix-cache hit beside a Mamba group in "align" mode (vllm 0.33.0), as a
function of the pool's cache entries before the lookup. Plain data: the request's hash units
(one per `hash_size` tokens, chained) and the set of cached (hash, group) keys, group 0 full
attention, group 1 the Mamba group, both in blocks of `block_size`.

Facts read in the released source:

- `KVCacheManager.get_computed_blocks`: no lookup for a request that skips the cache (or with
  caching off); else the hit is capped at `num_tokens - 1` (the last token is recomputed);
- `HybridKVCacheCoordinator.find_longest_cache_hit`: full attention first, then the Mamba group
  with full attention's hit as its cap; one pass suffices (`is_simple_hybrid`: two spec groups,
  full attention first), and the hit is the Mamba group's; the alignment is the hash block
  (`enable_partial_hash_hits` where the Mamba block is larger, `scheduler_block_size` = the
  block otherwise, the same number);
- `FullAttentionManager.find_longest_cache_hit`: the run of whole blocks cached from the start,
  each under the hash of its last hash unit (`BlockHashListWithBlockSize`), at most
  cap // block_size blocks; then, where hashed per fewer tokens than a block (fine-grained),
  the block after the run probed at its interior hash boundaries, latest first, below the cap
  and the hashed tokens (a partial entry there extends the hit);
- `MambaManager.find_longest_cache_hit`: the latest hash boundary at most its cap (and the
  hashed tokens) whose state is cached under the hash of the unit ending there (fine-grained:
  every hash boundary; else every block boundary, which is every hash boundary then).

`cached_blocks_this_step` changes what an admission counts, never the hit's length.

With EAGLE (`use_eagle`, no group flagged apart: every group takes the drop) the fixed point's
one pass looks full attention one drop unit past the cap (`eagle_proof_margin`: the hash block
here, the block where hashed per block) and drops one (`drop_eagle_block`: min(alignment,
block), the hash block), then asks the Mamba group with that as its cap, no margin and no drop
("its finder never drops"): `eagle_full_hit`.
"""

from __future__ import annotations

# the groups' ids as a trace names them (with full attention's group ordered last, the lock step
# reads the pool's ids in this order: fuzz/kvmanager/align_order.py)
FULL, MAMBA = 0, 1


def full_attention_hit(units: list[int], cap: int, block_size: int, hash_size: int,
                       cached) -> int:
    """Full attention's own hit in tokens: its run of whole cached blocks, then where hashed
    per fewer tokens than a block the latest cached hash boundary inside the next block."""
    per_block = block_size // hash_size
    whole = 0
    while whole < cap // block_size and (whole + 1) * per_block <= len(units) and \
            (units[(whole + 1) * per_block - 1], FULL) in cached:
        whole += 1
    if per_block > 1:
        first = whole * per_block  # the next block's first hash unit
        top = min(first + per_block - 1, cap // hash_size, len(units))
        for index in range(top - 1, first - 1, -1):
            if (units[index], FULL) in cached:
                return (index + 1) * hash_size
    return whole * block_size


def mamba_hit(units: list[int], cap: int, hash_size: int, cached) -> int:
    """The Mamba group's hit in tokens: the latest hash boundary at most `cap` whose state is
    cached (0: none)."""
    for index in range(min(cap // hash_size, len(units)) - 1, -1, -1):
        if (units[index], MAMBA) in cached:
            return (index + 1) * hash_size
    return 0


def eagle_full_hit(units: list[int], cap: int, block_size: int, hash_size: int,
                   cached) -> int:
    """Full attention's own hit under EAGLE's drop: looked up to one hash unit past `cap` (and
    no further than the hashed tokens), then one hash unit dropped (the drop unit and the
    margin are both the hash block: the hit alignment where it is below the block, the block
    itself otherwise)."""
    top = min(cap + hash_size, len(units) * hash_size)
    hit = full_attention_hit(units, top, block_size, hash_size, cached)
    return max(hit - hash_size, 0)


def hybrid_hits(units: list[int], num_tokens: int, block_size: int, hash_size: int,
                cached, eagle: bool = False, cap: int = -1) -> tuple[int, int]:
    """(full attention's own hit, the hit `get_computed_blocks` returns) for a request of
    `num_tokens` tokens that reads the cache: the hit is the Mamba group's latest cached state
    no deeper than full attention's, itself below the last token (with `eagle`, full
    attention's after EAGLE's drop: `eagle_full_hit`). Both are asked: the shared-prefix
    boundary and the connector's lookup read full attention's own. `cap`: the caller's
    `max_cache_hit_length` (-1: none, the manager's `num_tokens - 1`), taken where that is."""
    finder = eagle_full_hit if eagle else full_attention_hit
    full = finder(units, lookup_cap(num_tokens, cap), block_size, hash_size, cached)
    return full, mamba_hit(units, full, hash_size, cached)


def lookup_cap(num_tokens: int, cap: int = -1) -> int:
    """What the lookup is capped at: the caller's cap, at most `num_tokens - 1` (-1: that)."""
    top = max(num_tokens - 1, 0)
    return top if cap < 0 else min(cap, top)


def longest_hit(units: list[int], num_tokens: int, block_size: int, hash_size: int,
                cached, eagle: bool = False) -> int:
    """The hit `get_computed_blocks` returns (`hybrid_hits`)."""
    return hybrid_hits(units, num_tokens, block_size, hash_size, cached, eagle)[1]
