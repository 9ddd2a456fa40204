"""Drives SGLang's `UnifiedRadixCache` (sglang 0.5.23) with one tree core as its scheduler does: the
radix driver (`impl.radix.driver`: the released allocator in the loop, request rows, caller
tensors poisoned after each call) where the interface is the same, and where it differs:

- the cache is built with its tree components and the core asked for
  (`CacheInitParams.tree_components`, `tree_core_backend`); which core SGLang actually built,
  and why when it fell back from Rust (`tree_core_registry._rust_fallback_reason`), is `core()`;
- an allocation's eviction is `evict_for_alloc`, as the 0.5.23 allocator's
  `evict_to_free_tokens` calls it; a release is `release_kv_cache`'s calls, `on_release` too;
- the pin probe reads `inc_lock_ref`'s delta and the protected size while the lock is held;
- `insert` frees the caller's slots of what the tree had itself (the driver frees nothing);
- with the Mamba component (`mamba.py`), the hybrid request pool of Mamba states, inserts that
  hand the tree a state, matches that say where the request must branch;
- nodes are handles (`NodeId`s) the core mints, different between the cores: every handle a call
  returns is recorded with the tokens of its path (`_seen`), and the state is read through the
  core's public calls by path (`reader.py`), never through its node objects alone.

SGLang 0.5.20 and 0.5.21 are driven through their own calls (`impl/radix/legacy.py`: the
scheduler's `inc_lock_ref`/`dec_lock_ref` with the receipt, `cache_unfinished_req`,
`cache_finished_req` or `insert_req`), the path read without `collect_path_info` (`paths.py`),
the core asked for by `SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND` where `CacheInitParams` has no
`tree_core_backend` (0.5.20), and `claim_kv_row` and `on_release` called where the release has
them (0.5.21 names `on_release`'s flag `inserted`); with SWA the request's cursor read where the
release keeps it (`swa_cursor`), with Mamba a match's length from its `device_indices`.

SGLang 0.5.11's class has no tree core: its own nodes are read through a core's read calls
(`node_tree.py`: `tree_core`, handles are node ids), an eviction for an allocation is its `evict`
(no `evict_for_alloc`: its scheduler evicted so), and a pin's lock is dropped with the receipt
its `inc_lock_ref` result holds (`swa_uuid_for_lock`).

The bundled Rust extension is what runs (`SGLANG_RUST_BUILD_MODE=never`, unless set)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import os
from array import array

import torch

from kvfuzz.impl.radix.ints import int_list
from kvfuzz.impl.radix.driver import RadixDriver, _sglang, extra_key, matched_len
from kvfuzz.impl.radix.legacy import LegacyCalls, read_swa_cursor
from kvfuzz.impl.unified.backend import backend_in_environment, environment_backend
from kvfuzz.impl.unified.mamba import MambaCalls, mamba_pool, unified_pools
from kvfuzz.impl.unified.node_tree import NodeTree, has_own_nodes, walkable
from kvfuzz.impl.unified.old_locks import UnifiedLegacyCalls
from kvfuzz.impl.unified.paths import path_info
from kvfuzz.impl.unified.reader import light, snapshot

os.environ.setdefault("SGLANG_RUST_BUILD_MODE", "never")
RUST_CORE = "sglang.srt.mem_cache.rust_tree_core.adapter.RustUnifiedTreeCore"


class UnifiedDriver(MambaCalls, RadixDriver):
    def __init__(self, cls, page_size: int, size: int, policy: str, events: bool, rows: int,
                 context: int, device: str = "cpu", poison_keys: bool = True,
                 core: str | None = None, window: int = 0, mamba_slots: int = 0,
                 poison_mamba: bool = True, donor: bool = False):
        """`donor`: with the Mamba component, the unified memory pool's allocator (the Full
        donor, `mamba.unified_pools`) for both pools, in place of the released allocator and
        `HybridReqToTokenPool`."""
        kinds = _component_types(cls)
        self.FULL, self.SWA = kinds.FULL, (kinds.SWA if window else None)
        self.MAMBA = kinds.MAMBA if mamba_slots else None
        # (no TreeLock before 0.5.22: a lock is dropped with dec_lock_ref and its receipt)
        self.TreeLock = getattr(importlib.import_module(
            "sglang.srt.mem_cache.base_prefix_cache"), "TreeLock", None)
        self.asked = core
        self.cursor_by_component = None  # where the release keeps the SWA cursor: swa_cursor
        self.paths: dict[int, tuple] = {}  # node handle -> (extra_key, tokens root..its end)
        options = {"tree_components": (self.FULL,)}
        if window:  # the SWA component beside full attention, on the hybrid allocator
            options = {"tree_components": (self.FULL, self.SWA), "sliding_window_size": window}
        self.pool, self.poison_mamba = None, poison_mamba
        self.donor, self.shared = bool(donor and mamba_slots), None
        if self.donor:  # both pools in one byte buffer: the allocator is built with it
            self.shared, self.pool = unified_pools(page_size, size, mamba_slots, rows, context,
                                                   device)
        elif mamba_slots:  # the Mamba component, over a hybrid pool of Mamba states
            self.pool = mamba_pool(page_size, mamba_slots, rows, context, device)
        if mamba_slots:
            options = {"tree_components": (self.FULL, self.MAMBA), "req_to_token_pool": self.pool,
                       "enable_mamba_extra_buffer": page_size > 1}
        chosen = contextlib.nullcontext()
        if core is not None and _takes_backend():
            options["tree_core_backend"] = core
        elif core is not None:  # 0.5.20: the core is the environment's choice
            chosen = backend_in_environment(core)
        with chosen:
            super().__init__(cls, page_size, size, policy, events, rows, context, device,
                             poison_keys, **options)
        # where the class has no tree core (0.5.11), its own nodes read as one (node_tree.py)
        self.own_nodes = NodeTree(self.cache, self.FULL) if has_own_nodes(cls) else None
        if isinstance(self.calls, LegacyCalls):  # every lock with its receipt (old_locks.py)
            self.calls = UnifiedLegacyCalls(self.cache, self.allocator, self.rows, _dec_params)
        self._walked = None  # (the core, it as read: `tree_core`)

    @property
    def tree_core(self):
        """The tree core the state is read through (0.5.17-0.5.19's Python core with the
        read-only walk it lacks, `node_tree.walkable`)."""
        if self.own_nodes is not None:
            return self.own_nodes
        core = self.cache.tree_core
        if self._walked is None or self._walked[0] is not core:
            self._walked = (core, walkable(core, self.FULL))
        return self._walked[1]

    def root_handle(self):
        return (self.own_nodes or self.cache).root_node_handle()

    def handle(self, node):
        """What a call returned, as the handle the reads take (0.5.11: a node object)."""
        return node if self.own_nodes is None or node is None else self.own_nodes.handle(node)

    def _build_allocator(self, cls, size: int, page_size: int, device: str):
        """With the SWA component: SGLang's `SWATokenToKVPoolAllocator`, both pools `size`
        slots, over the stand-in KV pool the swa target builds it with (`impl/swa/kvcache.py`)."""
        if self.shared is not None:  # the unified memory pool's, built with the Mamba pool
            return self.shared
        if self.SWA is None:
            return super()._build_allocator(cls, size, page_size, device)
        from kvfuzz.impl.swa.kvcache import stand_in_kvcache

        hybrid = _swa_allocator()
        return hybrid(size, size, page_size, torch.float16, device, stand_in_kvcache(hybrid),
                      False)

    def _seen(self, node, tokens, extra) -> None:
        node = self.handle(node)
        if node is None or node == self.root_handle():
            return
        for info in path_info(self, node, tokens, extra):
            self.paths.setdefault(int(info.node_id), (extra, tuple(tokens[:info.path_end])))

    def checkpoint(self, rid: int, finishing: bool = False) -> int:
        """The node a checkpoint's insert ends at is named by the core's read-only walk
        (`match_full_device_prefix`), so that the state read sees it: before 0.5.22 the insert
        (`cache_unfinished_req`, `insert_req`, `cache_finished_req`) answers no node, and
        before 0.5.23 the lock moves to a rematch of the key, which an SWA window may cut
        above the insert (the request's lock then on a node above it: finding U,
        docs/release-history.md)."""
        protected = super().checkpoint(rid, finishing)
        request = self.requests[rid]
        self._seen_by_walk(request.tokens[:request.filled], request.extra_key)
        return protected

    def _seen_by_walk(self, tokens, extra) -> None:
        """The deepest node whose path `tokens` cover whole is named (the read-only walk)."""
        _, node, _ = self.tree_core.match_full_device_prefix(self.Key(array("q", tokens), extra))
        self._seen(node, tokens, extra)

    def insert(self, tokens, ns: int, priority: int, slots) -> int:
        """Where the release's `InsertResult` names no node (0.5.11), the insert's node is
        named by the read-only walk, as a checkpoint's is."""
        cached = super().insert(tokens, ns, priority, slots)
        if self.own_nodes is not None:
            self._seen_by_walk(list(tokens), extra_key(ns))
        return cached

    def swa_cursor(self, kv) -> int:
        """A request's SWA cursor where the release keeps it (`legacy.read_swa_cursor`)."""
        return read_swa_cursor(self, kv)

    def path(self, node):
        """`path_device_indices`, or before 0.5.22 what it reads: the core's
        `collect_full_device_indices` from the node up to the root."""
        if callable(getattr(self.cache, "path_device_indices", None)):
            return self.cache.path_device_indices(node)
        return self.tree_core.collect_full_device_indices(self.handle(node), self.root_handle())

    # -- which core runs ------------------------------------------------------------------------
    def core(self) -> dict:
        """What was asked for, what SGLang built, and why it fell back from Rust (None: no
        fallback, or Rust was not asked for)."""
        if self.own_nodes is not None:  # 0.5.11: the cache's own nodes, no core to ask for
            node = type(self.cache.root_node)
            return {"asked": self.asked, "backend": "python (no tree core)",
                    "built": f"{node.__module__}.{node.__qualname__}", "rust": False,
                    "fallback": None, "build_mode": ""}
        core = self.cache.tree_core
        built = f"{type(core).__module__}.{type(core).__qualname__}"
        # 0.5.17 and 0.5.18 keep no `_tree_core_backend`: they build the core the environment
        # names (a mutant's backend of its own too: upstream_mutants.py)
        backend = str(getattr(self.cache, "_tree_core_backend", None) or environment_backend())
        reason = None
        if self.asked in (None, "rust") and built != RUST_CORE:
            reason = _fallback_reason(self.params)
        return {"asked": self.asked, "backend": backend, "built": built, "rust": built ==
                RUST_CORE, "fallback": reason,
                "build_mode": os.environ.get("SGLANG_RUST_BUILD_MODE", "")}

    # -- the scheduler's calls that differ ----------------------------------------------------
    def evict_for_alloc(self, num_tokens: int) -> int:
        """`evict_for_alloc`, or where the release has none (0.5.11) `evict`, which its
        scheduler called before an allocation."""
        evict = getattr(self.cache, "evict_for_alloc", None) or self.cache.evict
        result = evict(self.EvictParams(num_tokens=num_tokens))
        return int(result.num_tokens_evicted)

    def evict_for_demand(self, demand: int) -> list[int]:
        """With SWA, what the hybrid allocator's `evict_to_free_tokens(cache, demand)` asks:
        each pool's shortfall, in one `evict_for_alloc`. [full shortfall, SWA shortfall, full
        tokens evicted, SWA tokens evicted]."""
        full = max(0, demand - self.allocator.full_available_size())
        swa = max(0, demand - self.allocator.swa_available_size())
        if not (full or swa):
            return [0, 0, 0, 0]
        result = self.cache.evict_for_alloc(self.EvictParams(num_tokens=full,
                                                             swa_num_tokens=swa))
        return [full, swa, int(result.num_tokens_evicted), int(result.swa_num_tokens_evicted)]

    def extend(self, rid: int, count: int, decode: bool = False):
        """With SWA, a decode step into a new page is made only when both pools have one: the
        hybrid allocator's `alloc_decode` takes one pool's page for good when the other has
        none (docs/upstream-sglang.md, the swa target), and the scheduler checks first."""
        if self.SWA is not None and decode and self.page_size > 1 and \
                self.requests[rid].filled % self.page_size == 0 and not self._both_have_a_page():
            return None
        return super().extend(rid, count, decode)

    def _both_have_a_page(self) -> bool:
        """`new_pages_available(1, 1)`, or before 0.5.14, which has none, what it reads: a whole
        page free in each pool."""
        check = getattr(self.allocator, "new_pages_available", None)
        if callable(check):
            return bool(check(1, 1))
        return min(self.allocator.full_available_size(),
                   self.allocator.swa_available_size()) >= self.page_size

    def alloc_slots(self, count: int):
        """A load-back's slots; the hybrid allocator's `alloc` is for page size 1 only."""
        if self.SWA is None or self.page_size == 1:
            return super().alloc_slots(count)
        zero, seq = torch.tensor([0]), torch.tensor([count])
        return int_list(self.allocator.alloc_extend(zero, zero.clone(), seq, seq.clone(),
                                                    torch.tensor([-1]), count))

    def release(self, rid: int, checkpointed: bool = True) -> None:
        """`release_kv_cache` after the checkpoint: `claim_kv_row` (no session: the row stays
        ours), `free_kv_row`, `unlock`, `on_release`, the row freed."""
        request = self.requests[rid]
        claim = getattr(self.cache, "claim_kv_row", None)  # (0.5.20: cache_finished_req's own)
        if callable(claim) and claim(request):
            raise RuntimeError("claim_kv_row took the row of a request with no session")
        super().release(rid, checkpointed)
        on_release = getattr(self.cache, "on_release", None)
        if callable(on_release):
            flag = "checkpointed" if "checkpointed" in inspect.signature(on_release).parameters \
                else "inserted"  # 0.5.21's name for it
            on_release(request, **{flag: checkpointed})

    def match(self, tokens, ns: int) -> list:
        """[matched length, the path's slots], and with the Mamba component the match's
        `mamba_branching_seqlen` (None: none)."""
        if self.MAMBA is None:
            return super().match(tokens, ns)
        key = self._key(tokens, ns)
        result = self.cache.match_prefix(self.MatchParams(key=key))
        self._poison_key(key)
        self._seen(result.last_device_node, tokens, key.extra_key)
        branch = result.mamba_branching_seqlen
        return [matched_len(result), int_list(self.path(result.last_device_node)),
                None if branch is None else int(branch)]

    def pin(self, tokens, ns: int) -> list[int]:
        """Match, `inc_lock_ref`, read the protected size, unlock: [delta, protected], and the
        Mamba or SWA protected size with that component."""
        key = self._key(tokens, ns)
        node = self.cache.match_prefix(self.MatchParams(key=key)).last_device_node
        self._poison_key(key)
        self._seen(node, tokens, key.extra_key)
        result = self.cache.inc_lock_ref(node)
        protected = int(self.cache.protected_size())
        mamba = [int(self.cache.mamba_protected_size())] if self.MAMBA is not None else \
            [int(self.cache.swa_protected_size())] if self.SWA is not None else []
        if self.TreeLock is None:  # before 0.5.22
            self.cache.dec_lock_ref(node, _dec_params(result))
        else:
            self.cache.unlock(self.TreeLock(node, result.to_dec_params()))
        if self.own_nodes is not None:  # 0.5.11: the delta as answered (the oracle: None)
            return [None if result.delta is None else int(result.delta), protected] + mamba
        return [int(result.delta or 0), protected] + mamba

    def reset(self) -> None:
        super().reset()
        if self.pool is not None:  # the scheduler's flush clears the request pool's states too
            self.pool.clear()
        self.paths.clear()  # every handle of the old tree is gone (and never minted again)

    def snapshot(self, compared_only: bool = False) -> dict:
        return snapshot(self, compared_only)

    def light_since(self, since: int):
        """The light read (`reader.light`) as what changed (`ChangedReads`)."""
        return self.changed("light", since, light(self))


def _component_types(cls):
    """`ComponentType`: in `unified_cache.component_type` from 0.5.17 on; 0.5.11 kept it in
    `unified_cache_components`, which its class's module imports it from."""
    try:
        return _sglang("unified_cache.component_type", "ComponentType")
    except ModuleNotFoundError:
        return _sglang("unified_cache_components", "ComponentType")


def _swa_allocator():
    """`SWATokenToKVPoolAllocator`: in `allocator/swa.py` from 0.5.13 on; 0.5.11 and 0.5.12 kept
    it in `swa_memory_pool` (same constructor)."""
    try:
        return _sglang("allocator.swa", "SWATokenToKVPoolAllocator")
    except ModuleNotFoundError:
        return _sglang("swa_memory_pool", "SWATokenToKVPoolAllocator")


def _dec_params(result):
    """The receipt `dec_lock_ref` takes: `to_dec_params()`, or before it (0.5.11) the
    `DecLockRefParams` its own callers build from the result."""
    if callable(getattr(result, "to_dec_params", None)):
        return result.to_dec_params()
    params = _sglang("base_prefix_cache", "DecLockRefParams")
    return params(swa_uuid_for_lock=getattr(result, "swa_uuid_for_lock", None))


def _takes_backend() -> bool:
    """Whether `CacheInitParams` names the tree core (0.5.21 on)."""
    params = _sglang("cache_init_params", "CacheInitParams")
    return any(field.name == "tree_core_backend" for field in dataclasses.fields(params))


def _fallback_reason(params) -> str:
    """SGLang's reason for not building the Rust core for these cache parameters."""
    try:
        from sglang.srt.mem_cache.unified_cache.tree_core_registry import _rust_fallback_reason
        return _rust_fallback_reason(params) or "no fallback reason given"
    except Exception as error:  # noqa: BLE001 - a release without it: say so
        return f"the fallback reason could not be read ({type(error).__name__})"


def warm_up(cls) -> None:
    """The Rust extension is loaded (dlopen, its torch bindings) and the page-hash C++ extension
    built or loaded the first time a cache uses them: seconds that belong to no input."""
    from kvfuzz.impl.radix.driver import warm_up as radix_warm_up

    radix_warm_up(cls)
    try:
        from sglang.srt.mem_cache.rust_tree_core.extension import bindings  # noqa: F401
    except Exception:  # noqa: BLE001 - the Rust entry's first input reports it
        pass
