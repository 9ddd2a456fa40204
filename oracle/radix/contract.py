"""What the scheduler's calls into a prefix cache promise, by SGLang release: 0.5.22 on (the
model's default), and before it, where the scheduler locked with `inc_lock_ref`/`dec_lock_ref`,
cached a running request with `cache_unfinished_req(req, chunked=True)` and a finished one with
`cache_finished_req` (0.5.21: `insert_req`). Plain Python; read from the release by the target
(impl/radix/legacy.py says what it found), carried as preconditions (the texts below).

| call                  | 0.5.22 on (`checkpoint`)                 | before 0.5.22                           |
|-----------------------|------------------------------------------|-----------------------------------------|
| chunk checkpoint hits | nodes past what the request inserted     | none (`chunked=True`)                   |
| finish: hits          | as a chunk checkpoint                    | every node of the path (`chunked=False`)|
| finish: lock, row     | matched again, row repointed, lock moved | lock kept on the admission node, row    |
|                       |                                          | left, until the release                 |
| prompt split          | at every checkpoint                      | at a finish where the release has it    |
|                       |                                          | (RadixCache 0.5.20, 0.5.21), else none  |
"""

from __future__ import annotations

from dataclasses import dataclass

LEGACY_CALLS = ("drives SGLang's scheduler calls from before 0.5.22 (inc_lock_ref/dec_lock_ref, "
                "cache_unfinished_req(chunked=True), cache_finished_req or insert_req): "
                "oracle/radix/contract.py")
FINISH_SPLITS_PROMPT = ("its finish re-inserts the prompt's pages (priority + 1), so that the "
                        "prompt and the output are nodes of their own")
# An SWA cache's window free before SGLang 0.5.21 (read by the unified target): the request's
# SWA cursor first rises to its protected length, whether or not the window has moved past a
# token (`free_swa_out_of_window_slots` without `eviction_interval`; oracle/unified/swa.py).
LIFTS_SWA_CURSOR = ("its window free lifts the request's SWA cursor to the protected length "
                    "even where the window has not moved (free_swa_out_of_window_slots "
                    "without eviction_interval)")
# ... and SGLang 0.5.14's keeps one page more: its threshold is `pre_len - window - page_size`
# (`drop_page_margin`, which its radix caches never pass), where 0.5.15 on keep max(window, page).
SWA_PAGE_MARGIN = ("its window free keeps one page past the window (evict_threshold = pre_len "
                   "- sliding_window_size - page_size: free_swa_out_of_window_slots with "
                   "drop_page_margin)")
# ... and before SGLang 0.5.18 its checkpoint frees nothing out of the window by default: 0.5.11-
# 0.5.13's SWA component has no window free, 0.5.14-0.5.17 call it only where the environment's
# SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS says so (False by default until 0.5.18): the
# scheduler's ScheduleBatch._evict_swa slides the window before a decode, which unified traces
# do not drive. The request's SWA cursor stays where it is at a checkpoint.
NO_CHECKPOINT_WINDOW_FREE = ("its checkpoint frees no SWA slots out of the window (no "
                             "free_out_of_window_slots, or SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_"
                             "WINDOW_SLOTS false): the request's SWA cursor stays")
# SGLang 0.5.11's UnifiedRadixCache, whose tree is nodes of its own (no tree core), read from its
# module's and components' sources (impl/unified/node_tree.py): one LRU list a component, no hit
# counts, no KV events, a lock's result without a delta.
LRU_ONLY = ("evicts least recently used first whatever the eviction_policy (nothing reads it: "
            "one UnifiedLRUList a component)")
NO_HIT_COUNTS = ("keeps no hit counts (no node's hit_count is raised without HiCache, which kvfuzz "
                 "does not build)")
NO_KV_EVENTS = "publishes no KV events (take_events is BasePrefixCache's: [])"
NO_LOCK_DELTA = "inc_lock_ref answers no delta (IncLockRefResult.delta stays None)"
# ... and its Mamba component names a branching point wherever the floored full hit is past 0,
# at or before the match too (its scheduler skips one not past the prefix; from 0.5.17 the tree
# names one past the match alone: oracle/unified/mamba.py).
BRANCHES_BEFORE_MATCH = ("names a Mamba branching point at or before the match (the full hit "
                         "floored to the grid, where past 0)")
# The unified memory pool before SGLang 0.5.20 (read by the unified target's donor entries): no
# Full donor (`mamba_full_cache_donor` came in 0.5.20), a Mamba allocation short of bytes evicts
# Mamba states alone (oracle/unified/donor.py).
NO_FULL_DONOR = ("has no Full donor: evict_for_alloc(mamba_num=1) takes Mamba states alone, never "
                 "Full leaves for a state's bytes (no mamba_full_cache_donor)")
# SGLang 0.5.22's UnifiedRadixCache: its checkpoint (`checkpoint_into_tree`, chunk and finish)
# matches the key again after the insert (`_match_tree`) and moves the lock to what that match
# ends at: a match, so it stamps the path's access times (the deepest node newest). 0.5.23 takes
# the insert's own node and stamps nothing more (read by the unified target from the release's
# code; the lock's node is finding U's, docs/release-history.md: the model keeps 0.5.23's).
CHECKPOINT_REMATCHES = ("its checkpoint matches the key again after the insert "
                        "(checkpoint_into_tree's _match_tree): the path's access times are "
                        "stamped as a match stamps them")
# the names impl/radix/legacy.py (and impl/unified/node_tree.py) read a release's API into
BY_NAME = {"legacy_calls": LEGACY_CALLS, "finish_splits_prompt": FINISH_SPLITS_PROMPT,
           "lru_only": LRU_ONLY, "no_hit_counts": NO_HIT_COUNTS, "no_kv_events": NO_KV_EVENTS,
           "no_lock_delta": NO_LOCK_DELTA, "branches_before_match": BRANCHES_BEFORE_MATCH}


@dataclass(frozen=True)
class Contract:
    legacy: bool = False             # the calls before 0.5.22 (the table above)
    finish_splits_prompt: bool = True
    lifts_swa_cursor: bool = False   # LIFTS_SWA_CURSOR (SGLang 0.5.20)
    swa_page_margin: bool = False    # SWA_PAGE_MARGIN (SGLang 0.5.14)
    checkpoint_frees_window: bool = True  # not NO_CHECKPOINT_WINDOW_FREE (SGLang 0.5.11-0.5.17)
    lru_only: bool = False           # LRU_ONLY, and the three below: SGLang 0.5.11's unified
    counts_hits: bool = True
    kv_events: bool = True
    lock_delta: bool = True
    branches_before_match: bool = False  # BRANCHES_BEFORE_MATCH (SGLang 0.5.11's Mamba)
    full_donor: bool = True          # NO_FULL_DONOR (the unified memory pool before 0.5.20)
    checkpoint_rematches: bool = False  # CHECKPOINT_REMATCHES (SGLang 0.5.22's unified cache)

    def policy(self, asked: str) -> str:
        """The eviction order the cache keeps for the policy it was built with."""
        return "lru" if self.lru_only else asked

    def chunk_inserted_len(self, inserted: int, key_len: int) -> int:
        """What a chunk checkpoint's insert counts hits past: none before 0.5.22."""
        return key_len if self.legacy else inserted

    def finish_inserted_len(self, inserted: int) -> int:
        """A finish counts a hit on every node before 0.5.22 (its insert is not `chunked`)."""
        return 0 if self.legacy else inserted

    def splits_prompt(self, finishing: bool) -> bool:
        if not self.legacy:
            return True
        return finishing and self.finish_splits_prompt


CURRENT = Contract()


def contract_of(preconditions) -> Contract:
    if LEGACY_CALLS not in preconditions:
        return Contract(checkpoint_rematches=True) if CHECKPOINT_REMATCHES in preconditions \
            else CURRENT
    return Contract(legacy=True, finish_splits_prompt=FINISH_SPLITS_PROMPT in preconditions,
                    lifts_swa_cursor=LIFTS_SWA_CURSOR in preconditions,
                    swa_page_margin=SWA_PAGE_MARGIN in preconditions,
                    checkpoint_frees_window=NO_CHECKPOINT_WINDOW_FREE not in preconditions,
                    lru_only=LRU_ONLY in preconditions,
                    counts_hits=NO_HIT_COUNTS not in preconditions,
                    kv_events=NO_KV_EVENTS not in preconditions,
                    lock_delta=NO_LOCK_DELTA not in preconditions,
                    branches_before_match=BRANCHES_BEFORE_MATCH in preconditions,
                    full_donor=NO_FULL_DONOR not in preconditions)
