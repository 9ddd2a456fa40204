"""Each broken SGLang `UnifiedRadixCache` (one edit of the released Python source of the cache, its
Python tree core, its full-attention, SWA or Mamba component, at least one per property
the lock step checks)
is caught by the seeded lock step with a readable, shrunk report that names the op, the property,
the tree core that ran and the replay command; the released class, with the core the mutant's
entry asks for, agrees on the shrunk trace. Skips without SGLang."""

from kvfuzz.impl.unified.upstream_mutants import MUTATIONS
from tests.helpers import mutant_tests

PREFIX = "mutant.sglang.unified."
PYTHON_CORE = r"(?s:.*)\n  tree core kvfuzz-mutant-\w+ \(UnifiedTreeCore\)"
PYTHON = r"(?s:.*)\n  tree core python \(UnifiedTreeCore\)"
RUST = r"(?s:.*)\n  tree core rust \(RustUnifiedTreeCore\); checked against the python core"
EXPECTED = {PREFIX + name: pattern for name, pattern in {
    "match_split_drops_slots": r"match +matched \d+ tokens, expected \d+" + PYTHON_CORE,
    "path_out_of_order": r"row +r\d+'s row: expected \[[\d, ]+\], actual" + PYTHON_CORE,
    "short_key_walks": r"crash +IndexError: RadixKey child range out of bounds" + PYTHON_CORE,
    "checkpoint_protects_match_len": r"checkpoint\(r\d+, up_to=\d+\)(?s:.*)result +expected \d+, "
                                     r"actual \d+" + RUST,
    "unlock_counts_shared_twice": r"evictable_size\(\) says \d+, its unlocked nodes hold \d+: "
                                  r"\d+ tokens counted twice" + PYTHON,
    "split_child_stale_key": r"is filed under edge \(.*\), not its first page" + PYTHON_CORE,
    "lock_leaf_twice": r"tree +node \[[\d ]+\]: lock expected \d+, actual \d+" + PYTHON,
    "unlock_keeps_full_locks": r"lock baseline:? +lock counts not back to baseline after a "
                               r"lock/unlock pair: the page ending \[[\d ]+\] had lock 0 "
                               r"before, 1 after" + PYTHON,
    "locked_leaf_evictable": r"locked node evicted:? +r\d+ holds a lock on" + PYTHON_CORE,
    "evict_stops_short": r"evict\(\d+\) freed \d+ tokens while \d+ were evictable: short"
                         + PYTHON,
    "parent_keeps_child_priority": r"eviction order:? +(evicted|kept) the page ending" + PYTHON,
    "split_drops_hit_count": r"hits expected \d+, actual \d+" + PYTHON_CORE,
    "match_keeps_access_time": r"access time out of the model's order" + PYTHON_CORE,
    "prompt_not_prioritized": r"tree +node \[[\d ]+\]: priority expected \d+, actual \d+"
                              + PYTHON,
    "leaf_keeps_caller_value": r"aliasing +the tensor the caller passed to insert" + PYTHON_CORE,
    "split_child_takes_upper_slots": r"\d+ slots twice in the tree" + PYTHON,
    "checkpoint_frees_protected": r"pages both in the tree and on the free list" + PYTHON_CORE,
    "evict_leaks_slots": r"\d+ tokens lost" + PYTHON,
    "new_leaf_never_announced": r"events +\d+ cached pages never announced" + PYTHON_CORE,
    "walk_positions_flat": r"walk +walk_for_kv_canary: \d+ \(slot, position, previous slot\) "
                           r"rows the tree does not have" + PYTHON_CORE,
    "total_size_counts_nodes": r"total_size\(\) says \(\d+, 0\), the nodes hold \d+" + PYTHON_CORE,
    # the free lists differ from the eviction on; the twin's whole state is read every few
    # ops (impl/unified/twin_parts.py), so the report may be the next allocation's answers
    "evict_frees_reversed": r"cores differ: (free|extend|alloc_slots): the Rust core "
                            r"(answered )?\[[\d, ]+\], the Python core (answered )?\[[\d, ]+\]"
                            + RUST,
    "swa_match_ignores_window": r"swa match +matched \d+ tokens, ending at .*less than a window "
                                r"of live SWA\); the deepest node with its \d+-token window live "
                                r"ends at \d+" + PYTHON,
    "swa_window_keeps_a_page_more": r"swa cursor:? +r\d+'s SWA cursor went from \d+ to \d+ at its "
                                    r"checkpoint, expected \d+" + PYTHON,
    "swa_lock_takes_the_path": r"swa lock:? +pin\(\d+ tokens\) added \d+ SWA slots to the "
                               r"protected size while locked, expected \d+" + PYTHON,
    "swa_evict_keeps_evictable": r"swa sizes +swa_evictable_size\(\) \d+ \+ swa_protected_size\(\) "
                                 r"\d+ vs \d+ live SWA slots in the tree: \d+ counted twice"
                                 + PYTHON,
    "mamba_branch_at_the_match": r"mamba branching:? +match\(.*\): mamba_branching_seqlen \d+, "
                                 r"expected None" + PYTHON,
    "mamba_match_ignores_state": r"mamba match:? +match\(.*\) matched \d+ tokens; the deepest "
                                 r"node with a Mamba state on its \d+-token full hit ends at \d+"
                                 + PYTHON,
    "mamba_exist_unsaid": r"mamba pool:? +\d+ free \+ \d+ in the tree vs \d+ Mamba slots: 1 lost"
                          + PYTHON,
    "mamba_lock_protects_nothing": r"mamba lock:? +pin\(.*\) protected 0 Mamba states while "
                                   r"locked, expected 1" + PYTHON,
    "donor_never_asked": r"mamba donor:? +no Mamba state after evict_for_alloc\(mamba_num=1\), "
                         r"with \d+ full tokens and \d+ states still evictable" + PYTHON,
    "donor_evicts_states_first": r"mamba donor:? +evict_for_alloc\(mamba_num=1\) took the state "
                                 r"of \d+ node\(s\) that stay, with \d+ Mamba ids free"
                                 + PYTHON,
    "donor_walks_on": r"mamba donor:? +evict_for_alloc\(mamba_num=1\) evicted \d+ nodes, \d+ "
                      r"bytes, for a state missing \d+ bytes: at least \d+ bytes past the "
                      r"first sufficient victim" + PYTHON,
    "donor_target_is_now": r"eviction:? +alloc\(\d+\) refused after evict_for_alloc, with \d+ "
                           r"full tokens still evictable" + PYTHON,
    "donor_tokens_unsaid": r"mamba donor:? +evict_for_alloc\(mamba_num=1\) answered 0 tokens and "
                           r"\d+ states evicted; \d+ tokens and \d+ states left the tree"
                           + PYTHON,
    # (shrunk, the pressure may find nothing left to take: the duplicate was reclaimable)
    "host_reclaims_no_duplicates": r"host reclaim order:? +evict_host\(\d+\) (evicted the sole "
                                   r"host copy of \[[\d, ]+\] while the settled duplicate "
                                   r"\[[\d, ]+\] kept its host copy|freed \d+ while "
                                   r"\[[\d, ]+\]'s host copy was reclaimable)" + PYTHON_CORE,
    # (or first by the release's own idle check: its host leaf set misses the parent)
    "host_walk_skipped": r"(host reclaim order:? +evict_host\(\d+\) freed \d+ while "
                         r"\[[\d, ]+\]'s host copy was reclaimable|crash +AssertionError: "
                         r"Sanity check FAILED)" + PYTHON_CORE,
    "falls_back_silently": r"tree core the Rust core was asked for and SGLang built "
                           r"\S+UnifiedTreeCore(?s:.*)\n  tree core python \(UnifiedTreeCore\), "
                           r"fell back from Rust",
}.items()}


def _original(name: str) -> str:
    """The released entry with the core (and the SWA or Mamba profile) the mutant's entry asks
    for."""
    broken = MUTATIONS[name[len(PREFIX):]]
    profile = "swa." if broken.swa else "mamba.donor." if broken.donor else \
        "mamba." if broken.mamba else "host." if broken.host else ""
    return f"sglang.unified.{profile}{broken.core}"


# seeded SWA trace 50 is the first whose pin reaches past a window of live SWA
FIRST = {PREFIX + "swa_lock_takes_the_path": 50,
         # seeded Mamba trace 5 pins at its second op
         PREFIX + "unlock_keeps_full_locks": 5}
test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("unified", EXPECTED, _original, first=FIRST)
