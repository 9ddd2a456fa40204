"""Broken variants of SGLang's `UnifiedRadixCache` (sglang 0.5.23): ONE edit of the released Python
source of the cache (`unified_radix_cache.py`), its Python tree core (`unified_tree_core.py`), its
full-attention component (`components/full.py`), its SWA component (`components/swa.py`, run
on the SWA profile) or its Mamba component (`components/mamba.py`, run on the Mamba profile),
each made by `impl/source_mutation.py` and wired in through SGLang's own extension points: an
edited core is registered as a tree-core backend of its own (`register_tree_core_backend`) and
built where the Python core is asked for, an edited component is passed as
`component_registry_override` where the Python core is asked for. Each breaks a
promise the scheduler relies on, at least one per property the lock step checks, several after
SGLang's history (issue numbers in `why`). `core` is the core its catalogue entry asks for:
"rust" runs the real Rust core with the broken Python core beside it (what only the comparison
of the two catches). They need sglang installed."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from kvfuzz.impl.registry import load_attribute
from kvfuzz.impl.unified.backend import backend_in_environment, environment_backend
from kvfuzz.impl.source_mutation import Mutation, mutant_module

CACHE = "sglang.srt.mem_cache.unified_radix_cache"
CORE = "sglang.srt.mem_cache.unified_cache.unified_tree_core"
FULL = "sglang.srt.mem_cache.unified_cache.components.full"
SWA = "sglang.srt.mem_cache.unified_cache.components.swa"
MAMBA = "sglang.srt.mem_cache.unified_cache.components.mamba"
RELEASED = f"{CACHE}:UnifiedRadixCache"


@dataclass(frozen=True)
class Broken:
    module: str
    mutation: Mutation
    core: str = "python"
    # "swa" or "mamba": the profile its entry runs though it edits another module (a fault of
    # the full-attention component that only a judge without the radix model's locks is left
    # to catch); "": the profile of the module it edits
    profile: str = ""

    @property
    def swa(self) -> bool:
        """Whether its entry runs the SWA profile (it edits the SWA component)."""
        return self.profile == "swa" or not self.profile and self.module == SWA

    @property
    def mamba(self) -> bool:
        """Whether its entry runs the Mamba profile (it edits the Mamba component)."""
        return self.profile in ("mamba", "donor") or not self.profile and self.module == MAMBA

    @property
    def host(self) -> bool:
        """Whether its entry runs the host-tier profile (HiCache write-back: a fault of the
        host tier, which no other profile reaches)."""
        return self.profile == "host"

    @property
    def donor(self) -> bool:
        """Whether its entry runs the Mamba profile on the unified memory pool (the Full
        donor of a Mamba allocation's eviction)."""
        return self.profile == "donor"

    @property
    def why(self) -> str:
        return self.mutation.why


def _core(scope, old, new, why, core="python", profile=""):
    return Broken(CORE, Mutation(f"UnifiedTreeCore.{scope}", old, new, why), core, profile)


def _full(scope, old, new, why, core="python", profile=""):
    return Broken(FULL, Mutation(f"FullComponent.{scope}", old, new, why), core, profile)


def _swa(scope, old, new, why, core="python"):
    return Broken(SWA, Mutation(f"SWAComponent.{scope}", old, new, why), core)


def _mamba(scope, old, new, why, core="python"):
    return Broken(MAMBA, Mutation(f"MambaComponent.{scope}", old, new, why), core)


def _cache(scope, old, new, why, core="python", profile=""):
    return Broken(CACHE, Mutation(f"UnifiedRadixCache.{scope}", old, new, why), core, profile)


MUTATIONS = {
    # the Full donor of a Mamba allocation (the unified memory pool: profile "donor")
    "donor_never_asked": _cache(
        "evict_for_alloc", "if mamba_free_ids >= mamba_target[1] and mamba_capacity < "
        "mamba_target[1]:", "if False:", "a Mamba allocation short of bytes with an id free "
        "evicts nothing: no state for the request", profile="donor"),
    "donor_evicts_states_first": _cache(
        "evict_for_alloc", "mamba_num=mamba_id_shortfall,", "mamba_num=params.mamba_num,",
        "a Mamba allocation short of bytes evicts a state although an id is free and Full "
        "could fund it", profile="donor"),
    "donor_walks_on": _cache(
        "evict_for_alloc", "{ComponentType.FULL: mamba_target},", "None,",
        "the Full donor's walk has no Mamba capacity target: it evicts every evictable Full "
        "leaf for one state", profile="donor"),
    "donor_target_is_now": _cache(
        "evict_for_alloc", "ct: (ct, self._component_available_size(ct) + request_cnt)",
        "ct: (ct, self._component_available_size(ct) + (request_cnt if ct == "
        "ComponentType.MAMBA else 0))",
        "a full allocation's eviction on the shared buffer aims at what is available already: "
        "it evicts nothing and the allocation is refused", profile="donor"),
    "donor_tokens_unsaid": _cache(
        "evict_for_alloc", "result.num_tokens_evicted += donor_result.num_tokens_evicted",
        "pass", "the Full donor's evicted tokens are left out of evict_for_alloc's answer",
        profile="donor"),
    # match length and device indices
    "match_split_drops_slots": _core(
        "_match_prefix_helper", "value.append(node.component_data[BASE_COMPONENT_TYPE].value)",
        "pass", "a match that ends inside a node leaves the split node's slots out"),
    "path_out_of_order": _core(
        "collect_full_device_indices", "prefix_chunks.reverse()", "pass",
        "the path's slots come deepest node first"),
    "short_key_walks": _core(
        "match_prefix", "key = key.page_aligned(self.page_size)\n        if len(key) == 0:",
        "key = key.page_aligned(self.page_size)\n        if False:",
        "a key shorter than a page walks the tree with an empty key (#10637)"),
    "checkpoint_protects_match_len": _cache(
        "checkpoint_into_tree", "req.kv.cache_protected_len = len(new_indices)",
        "req.kv.cache_protected_len = new_prefix_len",
        "a checkpoint protects only what the tree had before it, not what it inserted",
        core="rust"),
    # evictable and protected sizes
    "unlock_counts_shared_twice": _full(
        "release_component_lock", "if cd.lock_ref == 1 and cd.value is not None:",
        "if cd.lock_ref >= 1 and cd.value is not None:",
        "releasing a node two requests lock counts it evictable already (#35270's symptom)"),
    # edges keyed by the child's first page
    "split_child_stale_key": _core(
        "_split_node", "{key[split_len:].child_key(self.page_size): child}",
        "{key.child_key(self.page_size): child}",
        "a split files the lower child under its old first page (#36696)"),
    # lock counts monotone, back to baseline
    "lock_leaf_twice": _full(
        "acquire_component_lock", "cd.lock_ref += 1", "cd.lock_ref += 1 + (not cur.children)",
        "locking takes two references on a leaf, one on each node above"),
    "unlock_keeps_full_locks": _full(
        "release_component_lock", "cur = node", "cur = root",
        "an unlock releases nothing of the full-attention component: the path stays locked and "
        "protected (the sizes agree with the counts, which stay monotone), and the tree never "
        "evicts it again; run on the Mamba profile, whose judge keeps no model of the locks",
        profile="mamba"),
    # a locked node is never evicted
    "locked_leaf_evictable": _core(
        "_is_device_leaf", "if any(cd.lock_ref > 0 for cd in node.component_data):",
        "if any(cd.lock_ref > 1 for cd in node.component_data):",
        "a leaf locked by one request counts as evictable (mini-sglang #52's symptom)"),
    # eviction: at least the shortfall, only unlocked leaves, in policy order
    "evict_stops_short": _full(
        "_evict_device_next_node", "while tracker[ct] < self._evict_device_request_cnt and",
        "while tracker[ct] + 1 < self._evict_device_request_cnt and",
        "eviction stops a token short of what was asked"),
    "parent_keeps_child_priority": _full(
        "_evict_device_next_node", "(self.session_ref_eviction_strategy(lv.parent), lv.parent)",
        "(self.session_ref_eviction_strategy(lv), lv.parent)",
        "a parent left childless joins the eviction heap with its child's priority"),
    "split_drops_hit_count": _core(
        "_split_node", "new_node.hit_count = child.hit_count", "new_node.hit_count = 0",
        "a split's upper node starts with no hits (#18843)"),
    "match_keeps_access_time": _core(
        "_match_post_processor", "node_update.last_access_time = cur_time", "pass",
        "a match leaves the nodes it ends at as old as they were: LRU evicts hot prefixes"),
    "prompt_not_prioritized": _cache(
        "checkpoint_into_tree", "insert_params.priority + 1", "insert_params.priority",
        "the prompt's second insert keeps the request's priority: eviction by priority drops "
        "the prompt with the output"),
    # no tree value aliases a caller tensor or another node
    "leaf_keeps_caller_value": _core(
        "_add_new_node", "].value = value.clone()", "].value = value",
        "a new leaf keeps a view of the caller's value tensor (#17400)"),
    # no slot twice in the tree
    "split_child_takes_upper_slots": _full(
        "redistribute_on_node_split", "child_cd.value = child_cd.value[split_len:].clone()",
        "child_cd.value = child_cd.value[:len(child_cd.value) - split_len].clone()",
        "a split's lower node keeps the first slots (the upper node's) instead of its own"),
    # no slot both in the tree and on the free list
    "checkpoint_frees_protected": _core(
        "_insert_overlap_step",
        "dup_start = max(0, state.params.prev_prefix_len - state.total_prefix_length)",
        "dup_start = 0",
        "an insert frees the caller's protected prefix too: the tree's own slots go free"),
    # available + evictable + protected + held = capacity
    "evict_leaks_slots": _full(
        "apply_component_action", "alloc.free_segment(indices, start_pos=0)", "pass",
        "an evicted node's slots never reach the allocator"),
    # KV events: stored minus removed is what is cached
    "new_leaf_never_announced": _core(
        "_add_new_node", "self.kv_events.record_store(new_node, session_id=session_id)",
        "pass", "a new leaf publishes no BlockStored"),
    # the KV-canary walk and the tree's own counts
    "walk_positions_flat": _core(
        "walk_for_kv_canary", "positions.append(depth + j)", "positions.append(depth)",
        "the walk gives every slot of a node the node's first position"),
    "total_size_counts_nodes": _core(
        "total_size", "total_size += len(full_value)", "total_size += 1",
        "total_size() counts nodes, not slots"),
    # the Rust core against the Python core
    "evict_frees_reversed": _full(
        "evict_component", "device_frees[self.component_type].append(cd.value)",
        "device_frees[self.component_type].append(cd.value.flip(0))",
        "the Python core frees an evicted node's slots last first: the free list's order, "
        "which no oracle reads, differs from the Rust core's", core="rust"),
    # the SWA component (the SWA profile): a match keeps a whole window of live SWA
    "swa_match_ignores_window": _swa(
        "create_match_validator", "return state[\"len\"] >= sliding_window_size",
        "return True",
        "a match may end past a tombstone with less than a window of live SWA above it: the "
        "scheduler attends SWA slots that were freed"),
    "swa_window_keeps_a_page_more": _swa(
        "_free_out_of_window_slots", "sliding_window_size=self.sliding_window_size,",
        "sliding_window_size=self.sliding_window_size + self.cache.page_size,",
        "a checkpoint keeps a page more than the window of the request's SWA slots: the pool "
        "runs out a page early per running request"),
    "swa_lock_takes_the_path": _swa(
        "acquire_component_lock", "while cur != root and covered < sliding_window_size:",
        "while cur != root:",
        "a lock protects the SWA of the whole path, not the trailing window: SWA slots outside "
        "every running request's window can never be tombstoned while it runs"),
    "swa_evict_keeps_evictable": _swa(
        "evict_component", "self.tree_core.component_evictable_size_[ct] -= freed", "pass",
        "tombstoning a node leaves its SWA slots counted evictable (#35270's symptom, SWA side)"),
    # the Mamba component (the Mamba profile, tree ops)
    "mamba_branch_at_the_match": _mamba(
        "finalize_match_result_in_tree_core", "if aligned_seqlen > mamba_boundary_len",
        "if aligned_seqlen >= mamba_boundary_len",
        "a match that ends on the checkpoint grid names a branching point where it ends: the "
        "scheduler would donate a second state for a depth the tree already holds"),
    "mamba_match_ignores_state": _mamba(
        "create_match_validator", "return lambda node: node.component_data[ct].value is not None",
        "return lambda node: True",
        "a match may end at a node with no Mamba state: the scheduler resumes the recurrence "
        "from a state the tree does not have"),
    "mamba_exist_unsaid": _mamba(
        "commit_insert_component_data", "result.mamba_exist = True", "pass",
        "an insert that ends where the tree already holds a state does not say so: the caller "
        "keeps its own slot cached nowhere (the state pool leaks a slot per such insert)"),
    "mamba_lock_protects_nothing": _mamba(
        "acquire_component_lock", "if cd.lock_ref == 0 and value is not None:",
        "if cd.lock_ref == 0 and value is None:",
        "locking a node leaves its Mamba state counted evictable: a running request's state "
        "may be evicted, and the unlock counts it evictable twice (#35270's symptom, Mamba "
        "side)"),
    # HiCache's host tier (profile "host": write-back over kvfuzz's stand-in host pool)
    "host_reclaims_no_duplicates": _core(
        "drive_host_eviction", "and self.is_write_back\n", "and not self.is_write_back\n",
        "host pressure under write-back never reclaims a settled duplicate's host copy: it "
        "evicts sole host copies (KV the device no longer has) while copies the device still "
        "holds keep their host slots", profile="host"),
    "host_walk_skipped": _core(
        "_evict_host_leaf", "self._remove_leaf_from_parent(node)\n        self._iteratively_"
        "delete_tombstone_leaf(\n            node, tracker, device_frees, host_frees, "
        "cache_actions=cache_actions\n        )",
        "self._remove_leaf_from_parent(node)",
        "a host leaf's eviction skips the walk up: its host-only parent never becomes a host "
        "leaf, so host pressure stops short while host copies are reclaimable", profile="host"),
    # which core ran
    "falls_back_silently": _cache(
        "__init__", "self._tree_core_backend = select_tree_core_backend(params)",
        "self._tree_core_backend = \"python\"",
        "the cache builds the Python core whatever was asked for, saying nothing", core="rust"),
}


def __getattr__(name: str):
    if name not in MUTATIONS:
        raise AttributeError(name)
    return _cache_class(name)


@functools.cache
def _cache_class(name: str) -> type:
    """The cache class whose construction wires mutant `name` in."""
    broken = MUTATIONS[name]
    module = mutant_module(broken.module, broken.mutation, f"sglang_unified_{name}")
    if broken.module == CACHE:
        return module.UnifiedRadixCache
    if broken.module == CORE:
        backend = _backend(name, module.UnifiedTreeCore)
        python = {"tree_core_backend": backend}
    else:
        kind = load_attribute("sglang.srt.mem_cache.unified_cache.component_type:ComponentType")
        edited = {kind.SWA: module.SWAComponent} if broken.module == SWA else \
            {kind.MAMBA: module.MambaComponent} if broken.module == MAMBA else \
            {kind.FULL: module.FullComponent}
        python = {"component_registry_override": edited}
    return where_python_core(f"Broken_{name}", python, broken.why)


def where_python_core(name: str, change: dict, doc: str) -> type:
    """The released cache class, built with `change` made to its `CacheInitParams` where the
    Python core is asked for (an edited core's backend, a component registry override): how a
    mutant or a test's double of a core or component is wired in."""
    released = load_attribute(RELEASED)

    def __init__(self, params):
        if not hasattr(params, "tree_core_backend"):  # SGLang 0.5.20: the environment's core
            return _built_by_environment(self, released, params, change)
        if params.tree_core_backend == "python":
            params = replace(params, **change)
        released.__init__(self, params)
    return type(name, (released,), {"__init__": __init__, "__doc__": doc})


def _built_by_environment(cache, released, params, change: dict) -> None:
    """SGLang 0.5.20 names the core in the environment (the driver sets it,
    `backend.py`): an edited core's backend goes there, the rest into the parameters."""
    if environment_backend() != "python":
        return released.__init__(cache, params)
    fields = {key: value for key, value in change.items() if key != "tree_core_backend"}
    with backend_in_environment(change.get("tree_core_backend", "python")):
        released.__init__(cache, replace(params, **fields))


def _backend(name: str, core: type) -> str:
    """A tree-core backend of SGLang's registry that builds the edited core."""
    from sglang.srt.mem_cache.unified_cache.tree_core_registry import (
        get_tree_core_factory, register_tree_core_backend)

    backend = f"kvfuzz-mutant-{name}"
    if get_tree_core_factory(backend) is None:
        register_tree_core_backend(backend, lambda params, components: core(params, components))
    return backend
