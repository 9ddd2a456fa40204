"""The lookup of a scheduler with a KV connector (`get_computed_blocks_for_connector`), judged in
the reduced mode of Mamba "align" (`align.py`) at every admission, from the pool's cache keys
alone (the reduced mode models no hit length).

The contract (vLLM 0.33.0's docstring of `KVCacheManager.get_computed_blocks_for_connector`):
a hybrid model's per-group hits can diverge, a deeper Mamba state surviving where full
attention's tail was evicted or the reverse; the connector's lookup reports the full-attention
group's own hit as the local prefix and flags (`hit_diverged`) when that hit ran deeper than a
lagging group, falling back to `get_computed_blocks` (flag False) only where some group hit
deeper than full attention. So where every Mamba state the request could resume from lies
below the run of whole full-attention blocks cached under its hashes, no group hits deeper than
full attention, the lag is certain, and the lookup must report at least that run, with the
flag set. Elsewhere nothing is judged (whether the Mamba hit exceeds full attention's depends
on what the two lookups align to).

- `W`: the leading full-attention blocks cached under the request's hash of each block
  (`(hash of its last hash unit, group 0)`); full attention's own hit covers min(W, (T - 1) //
  b) blocks at least (T tokens, blocks of b: a hit never takes the last token).
- `M`: the deepest L, a multiple of the hash block at most T - 1, whose Mamba state is cached
  (`mamba_align.hit_key`, group 1); the Mamba group's own hit is at most M.

Where the answer is certain without a hit length, it is judged whole:
- a request that skips the cache (`prefix_cache_lookup_enabled` False): no blocks in any group,
  no hit, boundary 0, not diverged;
- full attention holds no unit of the request (no group-0 entry under any of its hash units):
  full attention's own hit is 0, so is the reconciled one a fallback takes, and no group lags
  below 0: hit 0, not diverged;
- the certain lag above: the per-group branch, whose shared-prefix boundary is 0 (it detects
  none).
And always: the boundary is a count of tokens, never negative.

Caught: `HybridKVCacheCoordinator.verify_and_split_kv_cache_groups` with its full-attention
test negated (`kvfuzz mutate`'s line 768 of `kv_cache_coordinator.py`): no full-attention
group id, every lookup sent to the reconciled hit, the lag never flagged; and in
`kv_cache_manager.py`, the skip's early return removed or its boundary 1 or -1 (line 361), the
per-group branch's boundary -1 and its flag `min(...) <= num_local`, set with no lag (line 378).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import crash_problems, short
from kvfuzz.oracle.kvmanager import mamba_align

JUDGED = "connector lookup: full attention deeper than every Mamba state"
SKIPPED = "connector lookup: a request that skips the cache"
NOTHING = "connector lookup: full attention holds none of the request"
EVENTS = (JUDGED, SKIPPED, NOTHING)


def cached_entries(keys: list) -> set:
    """Every (hash, group) entry of the pool as the last state read showed it."""
    entries = set()
    for block in keys[1:]:
        for entry in block if isinstance(block, list) else [block]:
            if entry:
                entries.add(tuple(entry))
    return entries


def expectation(skip: bool, units: list[int], tokens: int, block_size: int, hash_size: int,
                entries: set) -> tuple[str, int]:
    """What the lookup must answer: (SKIPPED, 0), (NOTHING, 0), (JUDGED, run) with the run full
    attention's own hit covers at least, or ("", 0) where only its shape is judged."""
    if skip:
        return SKIPPED, 0
    if not any((unit, 0) in entries for unit in units):
        return NOTHING, 0
    run = certain_lag(units, tokens, block_size, hash_size, entries)
    return (JUDGED, run) if run is not None else ("", 0)


def certain_lag(units: list[int], tokens: int, block_size: int, hash_size: int,
                entries: set) -> int | None:
    """The tokens full attention's own hit covers at least, where every Mamba state lies below
    them (a lag the lookup must flag); None where nothing is certain."""
    per_block = block_size // hash_size
    whole = 0
    while (whole + 1) * per_block <= len(units) and \
            (units[(whole + 1) * per_block - 1], 0) in entries:
        whole += 1
    run = min(whole, (tokens - 1) // block_size) * block_size
    deepest = max((length for length in range(hash_size, min(tokens - 1, len(units) * hash_size)
                                              + 1, hash_size)
                   if mamba_align.hit_key(units, length, hash_size) in entries), default=0)
    return run if deepest < run else None


def lookup_problems(expected: tuple[str, int], actual, raised) -> list[tuple[str, str]]:
    """`actual`: the lookup's (blocks per group, hit, boundary, hit_diverged)."""
    if raised is not None:
        return crash_problems(raised)
    try:
        blocks, hit, boundary, diverged = actual
    except (TypeError, ValueError):
        return [("prefix hit", f"get_computed_blocks_for_connector: expected (blocks, hit, "
                               f"boundary, hit_diverged), actual {short(actual)}")]
    said = f"actual hit {hit}, boundary {boundary}, hit_diverged {diverged}"
    if boundary < 0:
        return [("prefix hit", f"get_computed_blocks_for_connector: a shared-prefix boundary "
                               f"of {boundary} tokens; {said}")]
    kind, run = expected
    if kind == SKIPPED and (any(blocks) or hit or boundary or diverged is not False):
        return [("prefix hit", f"get_computed_blocks_for_connector of a request that skips the "
                               f"cache: expected no blocks, hit 0, boundary 0, hit_diverged "
                               f"False; blocks {short(blocks)}, {said}")]
    if kind == NOTHING and (hit or diverged is not False):
        return [("prefix hit", f"get_computed_blocks_for_connector: full attention caches no "
                               f"unit of the request: expected hit 0, hit_diverged False; "
                               f"{said}")]
    if kind == JUDGED and not (hit >= run and diverged is True and boundary == 0):
        return [("prefix hit", f"get_computed_blocks_for_connector: full attention caches {run} "
                               f"tokens of the request and every Mamba state lies below: expected "
                               f"a hit of at least {run} with hit_diverged True and boundary 0 "
                               f"(the per-group lookup's); {said}")]
    return []
