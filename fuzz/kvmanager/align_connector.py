"""The lookup of a scheduler with a KV connector (`get_computed_blocks_for_connector`), judged in
the reduced mode of Mamba "align" (`align.py`) at every admission, exactly, from the pool's cache
map before the lookup (`oracle/kvmanager/align_hit.py`'s lookups of each group).

The contract (vLLM 0.33.0's docstring of `KVCacheManager.get_computed_blocks_for_connector`):
a hybrid model's per-group hits can diverge, a deeper Mamba state surviving where full
attention's tail was evicted or the reverse; the connector's lookup reports the full-attention
group's own hit as the local prefix and flags (`hit_diverged`) when that hit ran deeper than a
lagging group, falling back to `get_computed_blocks` (flag False) only where some group hit
deeper than full attention. In its source: each group looked up on its own
(`find_longest_cache_hit_per_group`, each capped at `num_tokens - 1`; with EAGLE full attention's looked a unit further and
dropped); a Mamba
hit deeper than full attention's sends it to `get_computed_blocks` (the reconciled hit and its
shared-prefix boundary); else full attention's hit, flagged when the Mamba group's is shorter,
boundary 0 ("per-group lookups do not detect an uncached shared prefix"). A request that skips
the cache gets nothing: no blocks, no hit, boundary 0, not diverged.

`get_computed_blocks`' boundary (`shared_prefix_boundary`) in this two-group hybrid: one pass of
the coordinator's search, full attention first, so its longest single-group hit is full
attention's own, and the boundary is that where it runs past the reconciled hit, else 0
(`boundary`; the admission's lookup is judged by it too, `align_hits.py`).

Caught: `HybridKVCacheCoordinator.verify_and_split_kv_cache_groups` with its full-attention
test negated (`kvfuzz mutate`'s line 768 of `kv_cache_coordinator.py`): no full-attention
group id, every lookup sent to the reconciled hit, the lag never flagged; and in
`kv_cache_manager.py`, the skip's early return removed or its boundary 1 or -1 (line 361), the
per-group branch's boundary -1 and its flag `min(...) <= num_local`, set with no lag (line 378).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import crash_problems, short
from kvfuzz.oracle.kvmanager import align_hit

SKIPPED = "connector lookup: a request that skips the cache"
LAGGING = "connector lookup: full attention deeper than the Mamba group (flagged)"
AGREED = "connector lookup: both groups as deep"
DEEPER = "connector lookup: a Mamba state deeper than full attention (the reconciled hit)"
# both as deep past CPython's shared small ints (256): two equal hits are then two objects,
# and with the Mamba group first `min` returns its own (the "full last" profile: an identity
# test for `<` at line 378 differs there only)
AGREED_PAST_256 = "connector lookup: both groups as deep, past 256 tokens"
EVENTS = (SKIPPED, LAGGING, AGREED, DEEPER, AGREED_PAST_256)


def boundary(full: int, hit: int) -> int:
    """`get_computed_blocks`' shared-prefix boundary: full attention's own hit where it runs
    past the reconciled one (an uncached common prefix), else 0."""
    return full if full > hit else 0


def request_expectation(trace, cache, request, eagle: bool | None = None,
                        cap: int = -1) -> tuple[str, int, int, bool]:
    """`expectation` for a request of `trace` over the pool's keys `cache`: its hashes as the
    trace hashes them, caching off or the request skipping the cache as no lookup; `eagle`:
    the trace's unless given."""
    return expectation(request.skip or not trace.caching,
                       request.hashes(trace.hash_size, trace.hash_lookahead),
                       len(request.tokens), trace.block_size, trace.hash_size, cache,
                       trace.eagle if eagle is None else eagle, cap)


def expectation(skip: bool, units: list[int], tokens: int, block_size: int, hash_size: int,
                cached, eagle: bool = False, cap: int = -1) -> tuple[str, int, int, bool]:
    """(what, hit, boundary, hit_diverged) the lookup must answer, `cached` the pool's
    (hash, group) keys before it; with `eagle` full attention's own hit after EAGLE's drop
    (`find_longest_cache_hit_per_group` gives it the margin and the drop, the Mamba group
    neither); `cap`: the caller's (-1: none), each group's lookup capped there (since
    2026-12-07: with EAGLE full attention's looked a drop unit past it)."""
    if skip:
        return SKIPPED, 0, 0, False
    full, hit = align_hit.hybrid_hits(units, tokens, block_size, hash_size, cached, eagle, cap)
    mamba = align_hit.mamba_hit(units, align_hit.lookup_cap(tokens, cap), hash_size,
                                cached)  # its own hit
    if mamba > full:
        return DEEPER, hit, boundary(full, hit), False
    return (LAGGING if mamba < full else AGREED), full, 0, mamba < full


def lookup_problems(expected: tuple[str, int, int, bool], actual, raised) -> list[tuple[str, str]]:
    """`actual`: the lookup's (blocks per group, hit, boundary, hit_diverged)."""
    if raised is not None:
        return crash_problems(raised)
    try:
        blocks, hit, given, diverged = actual
    except (TypeError, ValueError):
        return [("prefix hit", f"get_computed_blocks_for_connector: expected (blocks, hit, "
                               f"boundary, hit_diverged), actual {short(actual)}")]
    what, *answer = expected
    if (hit, given, diverged) == tuple(answer) and (what != SKIPPED or not any(blocks)):
        return []
    why = {SKIPPED: "a request that skips the cache: nothing",
           LAGGING: "full attention's own hit, flagged: the Mamba group's is shorter",
           AGREED: "full attention's own hit, not flagged: the Mamba group's is as deep",
           DEEPER: "the reconciled hit of get_computed_blocks: a Mamba state lies deeper than "
                   "full attention's hit"}[what]
    return [("prefix hit", f"get_computed_blocks_for_connector: expected hit {answer[0]}, "
                           f"boundary {answer[1]}, hit_diverged {answer[2]} ({why}); actual "
                           f"hit {hit}, boundary {given}, hit_diverged {diverged}"
                           f"{f', blocks {short(blocks)}' if what == SKIPPED else ''}")]
