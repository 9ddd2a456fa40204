"""What vLLM's CPU offloading manager promises, by release: 0.31 on (the model's default), and
before it, where its cache policies had no request hooks. Plain Python; read from the release by
the target (impl/offload/release.py says what it found), carried as preconditions (the texts of
strategies/offload/profile.py).

| what                   | 0.31 on (`CURRENT`)                | before 0.31 (`legacy`)           |
|------------------------|------------------------------------|----------------------------------|
| LRU order              | by request and position (0.33)     | recency of the evictable chunks  |
| a request's end        | its keys reordered (LRU, ARC)      | nothing                          |
| a store miss (ARC)     | a ghost hit, once per request      | nothing (a touch still is one)   |
| the threshold filters  | the keys not in the cache          | the whole offer (a stored key    |
|                        |                                    | under it counts as skipped)      |
| the threshold counts   | each offer (`offer`)               | each offer (0.30), each key of   |
|                        |                                    | an offer (`key`, 0.29), each     |
|                        |                                    | lookup (`lookup`, 0.24-0.28)     |
| a failed store's event | a metadata-only removal (0.33)     | none                             |

vLLM 0.20-0.23 promise less again, each read from the release's classes: an LRU that keeps
every chunk in one list by store and touch (`lru_insertion.py`: no `mark_evictable`, before
0.24), no usage stats to compare (no `get_stats`, before 0.24), no request calls at all (no
`on_new_request` or `on_request_finished`, before 0.23: `on_new_request`'s answer is None), and
on 0.20 a lookup that answers a key being stored as a miss (True or False, no "retry later").
Traces with a reset (before 0.22) or a store threshold (before 0.22) are outside those classes'
contracts (strategies/offload/profile.py), not modelled.

0.31 and 0.32 have the request hooks but rank the LRU's chunks by recency alone (no request
positions: `lru.py`'s `RecencyRankLRUPolicy`) and publish no failed store's event, each read
from their classes; until 2026-12-04 they were kept on 0.33's contract, and those differences
were finding K of docs/release-history.md. What every release promises alike (a stored
key offered again stays in the cache, a store refused only when too few chunks are evictable)
is not a variant: where a release breaks it, that is a finding.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfuzz.strategies.offload.profile import (LEGACY_POLICIES, LRU_BY_INSERTION,
                                               NO_FAILED_EVENT, NO_REQUEST_CALLS, NO_STATS,
                                               PENDING_AS_MISS, RECENCY_RANKS,
                                               THRESHOLD_PER_KEY, THRESHOLD_PER_LOOKUP)


@dataclass(frozen=True)
class Contract:
    legacy: bool = False        # the policies before 0.31 (the table above)
    counting: str = "offer"     # how the store threshold counts: offer, key, lookup
    # vLLM 0.31, 0.32 (both implied by `legacy`):
    positions: bool = True      # the LRU ranks a request's chunks by position (0.33)
    failed_event: bool = True   # a failed store's metadata-only removal (0.33)
    # vLLM 0.20-0.23 (all implied by `legacy`):
    lru_by_insertion: bool = False  # the LRU list moves by store and touch alone (before 0.24)
    stats: bool = True              # get_stats() compared (none before 0.24)
    request_calls: bool = True      # on_new_request / on_request_finished (none before 0.23)
    pending_answer: bool = True     # lookup answers HIT_PENDING (0.20: a miss)

    @property
    def request_hooks(self) -> bool:
        return not self.legacy

    @property
    def failed_store_event(self) -> bool:
        return not self.legacy and self.failed_event


CURRENT = Contract()


def contract_of(preconditions) -> Contract:
    if LEGACY_POLICIES not in preconditions:
        if RECENCY_RANKS not in preconditions and NO_FAILED_EVENT not in preconditions:
            return CURRENT
        return Contract(positions=RECENCY_RANKS not in preconditions,
                        failed_event=NO_FAILED_EVENT not in preconditions)
    counting = "lookup" if THRESHOLD_PER_LOOKUP in preconditions else \
        "key" if THRESHOLD_PER_KEY in preconditions else "offer"
    return Contract(legacy=True, counting=counting,
                    lru_by_insertion=LRU_BY_INSERTION in preconditions,
                    stats=NO_STATS not in preconditions,
                    request_calls=NO_REQUEST_CALLS not in preconditions,
                    pending_answer=PENDING_AS_MISS not in preconditions)
