"""The Mamba component's side of the unified driver (`driver.py`): what a "full+mamba" cache needs
built (SGLang's `HybridReqToTokenPool` with a pool of Mamba state slots, the server arguments its
component reads at construction) and the tree calls that hand it states, in plain ints.

Built as SGLang's own test kit builds it (`sglang.test.kits.unified_radix_cache.fixtures`), without
the kit: a tiny Mamba2 state shape (the states' contents are never read here), the cache chunk
size `strategies.unified.trace.mamba_chunk`, and the extra (ping-pong) buffer above page size 1,
which the component requires there. No request holds a state of its own: an insert takes a slot
from the pool as the scheduler's `_alloc_mamba_slot` does (evicting one state when the pool is
empty) and hands it to the tree, and frees it when the tree already had a state there
(`mamba_exist`), as `cleanup_after_caching_req` does.

With the Full donor (`unified_pools`): the pools SGLang's unified memory pool builds for a hybrid
Mamba model (`init_unified_mamba_pools`), full KV pages and Mamba states in one byte buffer
(full at the high end, states at the low end, compacted eagerly), so that a state can be short
of bytes while its ids are free, and `evict_for_alloc(mamba_num=1)` takes Full leaves as the
donor (`UnifiedMambaTokenToKVPoolAllocator.mamba_full_cache_donor`)."""

from __future__ import annotations

import sys

import torch

from kvfuzz.impl.radix.ints import int_list
from kvfuzz.impl.poison import POISON
from kvfuzz.impl.unified.reader import tree_nodes, unmapped
from kvfuzz.strategies.unified.trace import mamba_chunk


def mamba_pool(page_size: int, slots: int, rows: int, context: int, device: str):
    """SGLang's `HybridReqToTokenPool` with `slots` Mamba states, after setting the global
    server arguments its Mamba component reads (page size, cache chunk size)."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool

    _server_args(page_size)
    shape = _shape()
    return HybridReqToTokenPool(
        size=rows, mamba_size=slots, mamba_spec_state_size=rows, max_context_len=context,
        device=device, enable_memory_saver=False,
        cache_params=Mamba2CacheParams(shape=shape, layers=[0]), mamba_layer_ids=[0],
        enable_mamba_extra_buffer=page_size > 1,
        speculative_num_draft_tokens=None if _drafts_on_cuda() else 3)


def _drafts_on_cuda() -> bool:
    """Whether the release's `MambaPool` puts its draft-token state caches on "cuda" whatever
    the device (SGLang 0.5.11): there the pool is built without draft tokens (no trace runs a
    speculative verify, and on a machine without CUDA those caches cannot be made)."""
    import inspect

    from sglang.srt.mem_cache.memory_pool import MambaPool

    try:
        return 'device="cuda"' in inspect.getsource(MambaPool.__init__)
    except (OSError, TypeError):
        return False


def unified_pools(page_size: int, size: int, slots: int, rows: int, context: int,
                  device: str):
    """(allocator, request pool) of SGLang's unified memory pool for a hybrid Mamba model: the
    buffer's bytes those of `size` full tokens and `slots` states (the split floats), an MHA
    full side of one layer (one head of 8 bf16: 32 bytes a token) and the Mamba state above
    (304 bytes: a state costs some 10 full tokens), eager compaction (no lazy holes: CPU has
    no forward events), as the model runner calls it with the unified pool on."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams
    from sglang.srt.mem_cache.unified_memory_pool import init_unified_mamba_pools

    _server_args(page_size)
    # SGLang refuses a buffer under one request's floor (3 states and the sink, about a state:
    # `_check_bs1_feasibility_floor`): the states' share is raised to 4 at least.
    slots = max(slots, 4)
    bundle = init_unified_mamba_pools(
        device=device, kv_cache_dtype=torch.bfloat16, head_num=1, head_dim=8,
        page_size=page_size, start_layer=0, end_layer=1, is_draft_worker=False,
        use_mla_backend=False, mamba_layer_ids=[0], full_attention_layer_ids=[1],
        mamba2_cache_params=Mamba2CacheParams(shape=_shape(), layers=[0]),
        model_context_len=context, extra_max_context_len=0, max_total_num_tokens=size,
        max_mamba_cache_size=slots, max_num_reqs=rows, enable_memory_saver=False,
        enable_mamba_extra_buffer=page_size > 1, enable_mamba_extra_buffer_lazy=False,
        speculative_num_draft_tokens=3, disable_overlap_schedule=True, need_sort=False)
    return bundle.token_to_kv_pool_allocator, bundle.req_to_token_pool


def _server_args(page_size: int) -> None:
    """The global server arguments the Mamba component reads (page size, cache chunk size)."""
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    args = ServerArgs(model_path="dummy", page_size=page_size)
    args._mamba_cache_chunk_size = mamba_chunk(page_size)  # no model config to read it from
    set_global_server_args_for_scheduler(args)


def _shape():
    from sglang.srt.configs.mamba_utils import Mamba2StateShape

    return Mamba2StateShape.create(tp_world_size=1, intermediate_size=16, n_groups=1,
                                   num_heads=1, head_dim=16, state_size=4, conv_kernel=2)


class MambaCalls:
    """The driver's Mamba calls (mixed into `UnifiedDriver`; `self.pool` is the hybrid pool)."""

    @property
    def mamba_allocator(self):
        """The pool of state slots: `mamba_allocator`, named `mamba_pool` in SGLang 0.5.11."""
        found = getattr(self.pool, "mamba_allocator", None)
        return found if found is not None else self.pool.mamba_pool

    def mamba_grid(self) -> int:
        """The grid the release floors a match's `mamba_branching_seqlen` to, read from the
        Mamba component the cache built, not from what kvfuzz asked for: its
        `mamba_checkpoint_grid` (`lcm(mamba_cache_chunk_size, page_size)`, 0.5.23), or where
        the component keeps none (0.5.11) the `mamba_cache_chunk_size` of the server
        arguments its own module reads at each match (0.5.11's is a property,
        `max(FLA_CHUNK_SIZE=64, page_size)`, which ignores `_mamba_cache_chunk_size`)."""
        component = self.cache.components[self.MAMBA]
        grid = getattr(component, "mamba_checkpoint_grid", None)
        if grid is None:
            module = sys.modules[type(component).__module__]
            grid = module.get_global_server_args().mamba_cache_chunk_size
        return int(grid)

    def mamba_slot(self) -> list:
        """A state slot for an insert: [slot or None (refused), states evicted, tokens evicted,
        the shared buffer before the eviction (None: no eviction, or no Full donor)]
        (`evict_for_alloc(mamba_num=1)` only when the pool is empty)."""
        allocator = self.mamba_allocator
        slot, states, tokens, before = allocator.alloc(1), 0, 0, None
        if slot is None:  # (0.5.11 has no evict_for_alloc: its scheduler called evict)
            before = self.donor_bytes()
            evict = getattr(self.cache, "evict_for_alloc", None) or self.cache.evict
            result = evict(self.EvictParams(num_tokens=0, mamba_num=1))
            states, tokens = int(result.mamba_num_evicted), int(result.num_tokens_evicted)
            slot = allocator.alloc(1)
        return [None if slot is None else int(slot[0]), states, tokens, before]

    def donor_bytes(self) -> dict | None:
        """With the Full donor, before a Mamba allocation's eviction: the shared buffer in
        bytes (the gap between the two ends, a full page's and a state's bytes), the Mamba ids
        free, the full tokens evictable, and the tree (`tree_brief`) to set against the tree
        after it (None: no donor)."""
        if not self.donor:
            return None
        full, mamba = self.allocator.full_attn_allocator, self.allocator.mamba_allocator
        return {"gap": int(mamba._current_gap_bytes()),  # eager: no holes, the gap is all
                "page": int(full.entry_bytes_per_page), "state": int(mamba.entry_bytes_per_page),
                "ids": int(self.pool.mamba_allocator.available_size()),
                "full_evictable": int(self.cache.full_evictable_size()),
                "nodes": self.tree_brief()}

    def tree_brief(self) -> list:
        """Each node as [extra key, path tokens, full slots, state slot or None], by path: the
        same for both cores (no handles, no order of theirs)."""
        nodes, _, handles = tree_nodes(self)
        core, brief = self.cache.tree_core, []
        for (_, extra, tokens, _, slots, _), handle in zip(nodes, handles):
            state = core.get_component_device_value(handle, self.MAMBA)
            brief.append([extra, tokens, slots or [], None if state is None else
                          int_list(state)[0]])
        return sorted(brief, key=lambda node: (len(node[1]), node[1], str(node[0])))

    def insert_mamba(self, tokens, ns: int, priority: int, slots, state: int) -> list:
        """`insert(key, value, mamba_value=[state])`: [cached length, mamba_exist]; the state
        freed when the tree had one there already."""
        value = torch.tensor(list(slots), dtype=torch.int64, device=self.device)
        mamba = torch.tensor([state], dtype=torch.int64, device=self.device)
        self.passed += [value, mamba]
        key = self._key(tokens, ns)
        result = self.cache.insert(self.InsertParams(key=key, value=value, priority=priority,
                                                     mamba_value=mamba))
        exist = bool(getattr(result, "mamba_exist", False))
        if exist:
            self.mamba_allocator.free(mamba.clone())
        value.fill_(POISON)
        # Both cores keep the caller's Mamba tensor as the node's state: declared
        # (`keeps_mamba_value`), since every in-tree caller hands over a fresh one.
        if self.poison_mamba:
            mamba.fill_(POISON)
        self._poison_key(key)
        node = getattr(result, "last_device_node", None)
        if node is not None:
            self._seen(node, tokens, key.extra_key)
        else:  # 0.5.11's InsertResult names no node, 0.5.15's and 0.5.16's leave it None: the
            self._seen_by_walk(list(tokens), key.extra_key)  # read-only walk names it
        return [int(result.prefix_len), exist]

    def mamba_state(self, handles: list) -> dict:
        """Each node's state slot (None: none), the pool's free slots in order, the sizes."""
        core, allocator = self.tree_core, self.mamba_allocator
        states = []
        for handle in handles:
            value = core.get_component_device_value(handle, self.MAMBA)
            states.append(None if value is None else int_list(value))
        # (the unified pool's `free_slots` are physical, its states virtual ids)
        free = unmapped(self.allocator.mamba_allocator) if self.donor else \
            int_list(allocator.free_slots)
        return {"states": states, "free": free,
                "available": int(allocator.available_size()), "capacity": int(allocator.size),
                "evictable": int(self.cache.mamba_evictable_size()),
                "protected": int(self.cache.mamba_protected_size())}
