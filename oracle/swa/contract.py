"""What an SWA allocator's release calls promise, by SGLang release: 0.5.19 on (the model's
default), and before it, where the class had no `free_full` and the scheduler released a finished
request's whole row with one `free` (SGLang's `ChunkCache.cache_finished_req`: "for hybrid
models, full_to_swa_index_mapping prevents SWA double-free": the window's passed tokens are
unmapped, so `free` finds no SWA peer for them). Plain Python; read from the release by the
target (impl/swa/legacy.py says what it found), carried as preconditions (the texts below).

| call                       | 0.5.19 on                        | before                          |
|----------------------------|----------------------------------|---------------------------------|
| a finish                   | free_full(passed), free(window)  | free(whole row): 0.5.10-0.5.18  |
| free_swa of unmapped slots | page size 1: slot 0 released (a  | skipped at every page size      |
|                            | caller's bug; strict rejects it) | (the row's passed tokens)       |
| free_swa (by itself) in a  | unmapped at the call, released   | unmapped and released at the    |
| free group                 | at the group's end               | call: 0.5.10-0.5.17 (the class  |
|                            |                                  | had no SWA group of its own)    |

Neither is a fault: a row's passed tokens have no SWA peer, so one `free` releases what the two
calls release; a window's SWA slots released at once inside a group are slots no one reads
again (the group only batches releases). What a free group does with `free` itself is not
relaxed here: keeping the mapping until the group's end is finding F (docs/release-history.md).
"""

from __future__ import annotations

from dataclasses import dataclass

ROW_FREE = ("no free_full (SGLang before 0.5.19): a finished request's row is released with "
            "one free of the whole row: oracle/swa/contract.py")
SWA_AT_ONCE = ("no SWA free group (SGLang before 0.5.18): free_swa inside a free group "
               "unmaps and releases at once: oracle/swa/contract.py")
# the names impl/swa/legacy.py reads a release's API into
BY_NAME = {"row_free": ROW_FREE, "swa_at_once": SWA_AT_ONCE}


@dataclass(frozen=True)
class Contract:
    row_free: bool = False     # a finish is one `free` of the whole row
    swa_group: bool = True     # free_swa inside a group defers its release to the group's end


CURRENT = Contract()


def contract_of(preconditions) -> Contract:
    return Contract(row_free=ROW_FREE in preconditions,
                    swa_group=SWA_AT_ONCE not in preconditions)
