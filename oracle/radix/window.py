"""The sliding window of SGLang's `PureSWARadixCache` (sglang 0.5.23: `pure_swa_radix_cache.py`,
`radix_cache.py: checkpoint`, `common.py: free_swa_out_of_window_slots, free_kv_row_segments`,
`schedule_batch.py: ReqKvInfo.swa_dead_lo, maybe_evict_swa`) over its one pool
(`PureSWATokenToKVPoolAllocator`: every slot is an SWA slot), as plain-Python facts and a model:

- The floor: a prefill-aware model runner sets `swa_evict_floor` to the end of each prefill
  chunk; a checkpoint then caches only the key's first `ceil_align(floor)` tokens (none cut
  with the floor 0), the rest of the row stays the request's.
- The window's frees: before a decode step (once the request has decoded a token) the
  scheduler calls `evict_sliding_windows(req, pre_len)` with `pre_len` the tokens the request
  holds. Nothing moves while `pre_len - window < cursor + 1`; else the cursor rises to
  `swa_dead_lo = max(protected, floor)` (page-ceiled above `protected`), then to
  `pre_len - ceil_align(max(window, page_size))`, page-floored, freeing the row's slots of
  [old cursor, new cursor) to the pool.
  | row range                     | whose                      |
  | [0, protected)                | the tree's                 |
  | [protected, dead_lo)          | the request's              |
  | [dead_lo, max(cursor, dead_lo)) | freed by the window        |
  | [that, filled)                | the request's              |
- A release frees the request's ranges only (`free_kv_row_segments` hands the freed run to
  `free_full_segments`, which frees nothing on the one pool).
- Sizes: `swa_evictable_size()` and `swa_protected_size()` are the tree's evictable and
  protected sizes; `full_evictable_size()` and `full_protected_size()` are 0 (no full pool).
- Eviction takes `max(num_tokens, swa_num_tokens)`: a pure-SWA scheduler asks with
  `swa_num_tokens` alone (`reclaim_for_prealloc`) or both at once (`evict_to_free_tokens`).
- No tombstones: a node's value is all its slots or the node is gone (the tree's own checks).

The floor is what keeps the frees above what a checkpoint caches: with the floor 0 a request that
slid its window and is then checkpointed inserts freed slots into the tree (the finding in
docs/upstream-sglang.md); the model follows the release there, and the judge's pool invariant
names it."""

from __future__ import annotations

from kvfuzz.oracle.radix.model import RadixModel
from kvfuzz.oracle.radix.contract import CURRENT, Contract


def ceil_align(n: int, page_size: int) -> int:
    return -(-n // page_size) * page_size


def dead_lo(protected: int, floor: int, page_size: int) -> int:
    """The lowest row position the window may free (`ReqKvInfo.swa_dead_lo`)."""
    lo = max(protected, floor)
    return ceil_align(lo, page_size) if page_size > 1 and lo > protected else lo


def key_limit(floor: int, page_size: int) -> int | None:
    """How many tokens of its page-aligned key a checkpoint caches (None: all)."""
    return ceil_align(floor, page_size) if floor > 0 else None


def slide(pre_len: int, cursor: int, protected: int, floor: int, window: int,
          page_size: int) -> tuple[int, int]:
    """(start, end): the window at `pre_len` frees the row's [start, end) (empty when equal);
    `end` is the request's cursor after it."""
    if pre_len - window < cursor + 1:  # the scheduler's eviction interval is 1
        return cursor, cursor
    start = max(cursor, dead_lo(protected, floor, page_size))
    threshold = pre_len - ceil_align(max(window, page_size), page_size)
    end = max(start, threshold) // page_size * page_size
    return start, max(start, end)


def own_ranges(filled: int, protected: int, cursor: int, floor: int,
               page_size: int) -> list[tuple[int, int]]:
    """The row ranges a live request still holds itself (what its release frees)."""
    lo = min(max(dead_lo(protected, floor, page_size), protected), filled)
    hi = min(max(cursor, lo), filled)
    return [(start, end) for start, end in ((protected, lo), (hi, filled)) if end > start]


def swa_sizes(evictable: int, protected: int) -> dict:
    """What a pure-SWA cache's four size reads are, from the tree's two."""
    return {"swa_evictable": evictable, "swa_protected": protected, "full_evictable": 0,
            "full_protected": 0}


class WindowModel(RadixModel):
    """The radix model with each request's window cursor and floor (`RadixModel`'s requests
    gain `cursor` and `floor`)."""

    def __init__(self, page_size: int, size: int, policy: str, window: int,
                 contract: Contract = CURRENT):
        """`contract`: the scheduler calls' (contract.py; before 0.5.22, the old calls')."""
        super().__init__(page_size, size, policy, contract)
        self.window = window

    def admit_match(self, rid: int, tokens, prompt: int, ns: int, priority: int) -> list:
        found = super().admit_match(rid, tokens, prompt, ns, priority)
        self.requests[rid].cursor = self.requests[rid].floor = 0
        return found

    def set_floor(self, rid: int, floor: int) -> None:
        self.requests[rid].floor = floor

    def slide(self, rid: int) -> int:
        """`evict_sliding_windows(req, filled)`: the request's cursor after it."""
        r = self.requests[rid]
        start, end = slide(r.filled, r.cursor, r.protected, r.floor, self.window,
                           self.page_size)
        self.free_slots(r.row[start:end])
        r.cursor = end
        return end

    def checkpoint(self, rid: int, finishing: bool = False) -> int:
        self.finishing = finishing  # (what `key_limit` reads under the old calls)
        return super().checkpoint(rid, finishing)

    def key_limit(self, request) -> int | None:
        """The floor cuts a checkpoint's key; under the calls before 0.5.22 (contract.py) only a
        finish's (`cache_finished_req`, `insert_req`): a chunk's `cache_unfinished_req` is
        RadixCache's own, which caches the whole key (SGLang 0.5.15-0.5.21)."""
        if self.contract.legacy and not getattr(self, "finishing", False):
            return None
        return key_limit(request.floor, self.page_size)

    def _own(self, r) -> list[int]:
        return [slot for start, end in own_ranges(r.filled, r.protected, r.cursor, r.floor,
                                                  self.page_size) for slot in r.row[start:end]]

    def held(self) -> set[int]:
        return {slot // self.page_size for r in self.requests.values() if not r.stale
                for slot in self._own(r)}

    def release(self, rid: int, checkpointed: bool = True) -> None:
        r = self.requests.pop(rid)
        self.free_slots(self._own(r))
        self.tree.unlock(r.node)

    def swa_sizes(self) -> dict:
        return swa_sizes(self.tree.evictable_size(), self.tree.protected_size())
