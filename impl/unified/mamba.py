"""The Mamba component's side of the unified driver (`driver.py`): what a "full+mamba" cache needs
built (SGLang's `HybridReqToTokenPool` with a pool of Mamba state slots, the server arguments its
component reads at construction) and the tree calls that hand it states, in plain ints.

Built as SGLang's own test kit builds it (`sglang.test.kits.unified_radix_cache.fixtures`), without
the kit: a tiny Mamba2 state shape (the states' contents are never read here), the cache chunk
size `strategies.unified.trace.mamba_chunk`, and the extra (ping-pong) buffer above page size 1,
which the component requires there. No request holds a state of its own: an insert takes a slot
from the pool as the scheduler's `_alloc_mamba_slot` does (evicting one state when the pool is
empty) and hands it to the tree, and frees it when the tree already had a state there
(`mamba_exist`), as `cleanup_after_caching_req` does."""

from __future__ import annotations

import torch

from kvfuzz.impl.radix.ints import int_list
from kvfuzz.impl.poison import POISON
from kvfuzz.strategies.unified.trace import mamba_chunk


def mamba_pool(page_size: int, slots: int, rows: int, context: int, device: str):
    """SGLang's `HybridReqToTokenPool` with `slots` Mamba states, after setting the global
    server arguments its Mamba component reads (page size, cache chunk size)."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    args = ServerArgs(model_path="dummy", page_size=page_size)
    args._mamba_cache_chunk_size = mamba_chunk(page_size)  # no model config to read it from
    set_global_server_args_for_scheduler(args)
    shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=16, n_groups=1,
                                    num_heads=1, head_dim=16, state_size=4, conv_kernel=2)
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


class MambaCalls:
    """The driver's Mamba calls (mixed into `UnifiedDriver`; `self.pool` is the hybrid pool)."""

    @property
    def mamba_allocator(self):
        """The pool of state slots: `mamba_allocator`, named `mamba_pool` in SGLang 0.5.11."""
        found = getattr(self.pool, "mamba_allocator", None)
        return found if found is not None else self.pool.mamba_pool

    def mamba_slot(self) -> list:
        """A state slot for an insert: [slot or None (refused), states evicted, tokens evicted]
        (`evict_for_alloc(mamba_num=1)` only when the pool is empty)."""
        allocator = self.mamba_allocator
        slot, states, tokens = allocator.alloc(1), 0, 0
        if slot is None:  # (0.5.11 has no evict_for_alloc: its scheduler called evict)
            evict = getattr(self.cache, "evict_for_alloc", None) or self.cache.evict
            result = evict(self.EvictParams(num_tokens=0, mamba_num=1))
            states, tokens = int(result.mamba_num_evicted), int(result.num_tokens_evicted)
            slot = allocator.alloc(1)
        return [None if slot is None else int(slot[0]), states, tokens]

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
        if hasattr(result, "last_device_node"):
            self._seen(result.last_device_node, tokens, key.extra_key)
        else:  # 0.5.11's InsertResult names no node: the read-only walk names it
            self._seen_by_walk(list(tokens), key.extra_key)
        return [int(result.prefix_len), exist]

    def mamba_state(self, handles: list) -> dict:
        """Each node's state slot (None: none), the pool's free slots in order, the sizes."""
        core, allocator = self.tree_core, self.mamba_allocator
        states = []
        for handle in handles:
            value = core.get_component_device_value(handle, self.MAMBA)
            states.append(None if value is None else int_list(value))
        return {"states": states, "free": int_list(allocator.free_slots),
                "available": int(allocator.available_size()), "capacity": int(allocator.size),
                "evictable": int(self.cache.mamba_evictable_size()),
                "protected": int(self.cache.mamba_protected_size())}
