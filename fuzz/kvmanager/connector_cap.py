"""The caller's cap beside a KV connector's lookup (`Connect.max_hit`), mixed into
`KVManagerLockstep` with `ConnectorOps`: what vLLM 0.33.0's scheduler does with the
auxiliary-output connector's `max_cache_hit` at a connector admission (`Scheduler.schedule`
1117-1127, 1189-1197), read before the judge:

- the lookup takes the cap: `get_computed_blocks_for_connector(request, cap)` (or
  `get_computed_blocks`, for a connector that does not take divergent hybrid hits: the same
  lookup without a Mamba group), the cap at most `num_tokens - 1` as the connector gives it;
- the external tokens are dropped (`AuxOutputSchedulerConnector.cap_external_hit`: 0) unless
  the local hit and they end on a block of the connector's group (full attention's, group 0
  here) at most at the cap, and an asynchronous load without them is none (`load_kv_async &=`).
  (vLLM reads `full_attention_group_id`'s block size, else group 0's: the model's group 0 is
  full attention in any order, `full_last` too, and the first window where there is none.)
"""

from __future__ import annotations

CAPPED = "connector lookup capped by the caller"
DROPPED = "external tokens dropped by the caller's cap"
KEPT = "external tokens kept under the caller's cap"
# beside a Mamba "align" group (`align_hits.py`, `align_external.py`): a capped lookup, and one
# whose answer the cap changed (the judge's expectation again without it)
ALIGN_CAPPED = "Mamba align: a lookup capped by the caller"
ALIGN_CUT = "Mamba align: a lookup's answer changed by the caller's cap"
EVENTS = (CAPPED, DROPPED, KEPT, ALIGN_CAPPED, ALIGN_CUT)


def lookup_cap(max_hit: int, num_tokens: int) -> int:
    """The cap passed to the lookup: `min(max_hit, num_tokens - 1)` (the connector's own
    bound), -1 where the op passes none."""
    return min(max_hit, num_tokens - 1) if max_hit >= 0 else -1


def cap_text(cap: int) -> str:
    return f", max {cap}" if cap >= 0 else ""


def capped_args(rid: int, cap: int) -> tuple:
    """A lookup's driver arguments: the cap passed only where the caller gives one."""
    return (rid,) if cap < 0 else (rid, cap)


class ConnectorCap:
    """Mixed into `KVManagerLockstep` (its `count`)."""

    def capped_external(self, cap: int, hit: int, external: int, size: int) -> int:
        """`cap_external_hit`: the external tokens the scheduler keeps under the cap `cap`
        (-1: none passed, all of them); `size`: full attention's block size."""
        if cap < 0:
            return external
        self.count(CAPPED)
        if not external:
            return 0
        total = hit + external
        kept = external if total % size == 0 and total <= cap else 0
        self.count(KEPT if kept else DROPPED)
        return kept

    def capped_at_partial(self, cap: int, local: int, partial: int, held: int,
                          size: int) -> tuple[bool, int]:
        """Beside a Mamba "align" group (`align_external.py`), where the local hit may end
        inside a block (`partial` tokens past the block), `held` the tokens the connector
        holds past the block-aligned hit: (whether the scheduler drops the partial tail, the
        external tokens it keeps). The release drops the tail for more external tokens than
        it first, then `cap_external_hit` sees the block-aligned hit and may drop those too:
        the truncated hit is then admitted with nothing loaded (`align_tail_drop.py`), a
        diverged one reconciled by `get_computed_blocks` (the plain admission). A tail kept
        (the connector holding no more than it) loads nothing: the cap's count alone."""
        if partial and held > partial:
            return True, self.capped_external(cap, local - partial, held, size)
        return False, self.capped_external(cap, local, 0 if partial else held, size)
