"""The host tier of SGLang's `UnifiedRadixCache` (HiCache, `--hicache-write-policy write_back`, host
memory mode "cache") with kvfuzz's stand-ins for what needs a GPU: the host KV pool and the
D<->H copy engine (`HybridCacheController`), both synchronous on the CPU. Everything else is the
released code: the cache's own HiCache orchestration (`_evict_components`' deferred write-back
backup then demote, `_drop_subtree_no_host`, `evict_host`, `load_back`, `writing_check`,
`loading_check`) and the tree core's host calls it makes (`evict_device_leaf`, `commit_backup`,
`finish_write_through`, `demote`, `drive_host_eviction` with its settled-duplicate reclaim,
`build_load_back_spec`, `commit_load_back`, `finish_load_back`, `inc_host_lock_ref`/`dec`).

Why stand-ins: `init_hicache` builds a host pool mirroring the device KV pool's layers in pinned
memory and a controller whose transfers run on device streams with events; kvfuzz's device pool
is a stand-in without layers, and a copy's bytes are no part of the tree's contract. The
stand-in controller hands out host slots from a free list (`HostSlots`), acks every write and
load at once (the cache still drains the acks through its own `writing_check`/`loading_check`),
and allocates a load-back's device slots from the released allocator, as the controller's
`load` does. The load-back threshold is the release's (10 tokens: a shorter host hit is
recomputed, not loaded).

`HostDriver` is the unified driver (`driver.py`) with this tier installed and the calls the
"full+host" traces make (`fuzz/unified/host_lockstep.py`); `host_state` reads every node's Full
device and host slots, locks and duplicates through the Python core's nodes."""

from __future__ import annotations

import hashlib
import logging
from types import SimpleNamespace

import torch

from kvfuzz.impl.radix.ints import int_list
from kvfuzz.impl.unified.driver import UnifiedDriver


class HostSlots:
    """kvfuzz's host KV pool: slot ids 0..size-1 and a free list (what `HostKVCache`'s allocator
    keeps); `alloc` answers None when short, as the host pool does."""

    def __init__(self, size: int):
        self.size = size
        self.free_slots = list(range(size))

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, count: int):
        if count > len(self.free_slots):
            return None
        taken, self.free_slots = self.free_slots[:count], self.free_slots[count:]
        return torch.tensor(taken, dtype=torch.int64)

    def free(self, indices, pool=None) -> None:
        self.free_slots.extend(int_list(indices))

    def clear(self) -> None:
        self.free_slots = list(range(self.size))


class _Done:
    """A finished copy's event."""

    @staticmethod
    def synchronize() -> None:
        return None

    @staticmethod
    def query() -> bool:
        return True


def _ack(node_id: int):
    return SimpleNamespace(node_ids=[node_id], finish_event=_Done(), start_event=_Done(),
                           num_tokens_by_pool=None, num_bytes=0, timing_enabled=False)


class StandInController:
    """The calls `UnifiedRadixCache` makes of its `HybridCacheController` on the write-back and
    load-back paths, done at once on the CPU."""

    enable_storage = False
    pp_prefetch_command_group = None
    prefetch_tokens_occupied = 0

    def __init__(self, slots: HostSlots, allocator, write_policy: str = "write_back"):
        self.slots, self.allocator, self.write_policy = slots, allocator, write_policy
        # `_execute_kv_backup` reads the anchor entry's pool for a shared allocation domain
        anchor = SimpleNamespace(host_pool=SimpleNamespace(shared_allocation_domain=None),
                                 host_evict_fn=None)
        self.mem_pool_host = SimpleNamespace(anchor_entry=anchor,
                                             available_size=slots.available_size,
                                             clear=slots.clear, free=slots.free)
        self.ack_write_queue, self.ack_load_queue = [], []

    def write(self, device_indices, node_id, extra_pools=None, flush=True, **_):
        host = self.slots.alloc(len(device_indices))
        if host is not None:
            self.ack_write_queue.append(_ack(node_id))
        return host

    def start_writing(self) -> None:
        return None

    def load(self, host_indices, node_id, extra_pools=None, **_):
        device = self.allocator.alloc(len(host_indices))
        if device is not None:
            self.ack_load_queue.append(_ack(node_id))
        return device

    def reset(self) -> None:
        self.ack_write_queue.clear()
        self.ack_load_queue.clear()


class StandInPoolGroup:
    """`host_pool_group`: the Full component frees its host values through it."""

    def __init__(self, slots: HostSlots):
        self.slots, self.entry_map = slots, {}

    def free(self, indices, pool=None) -> None:
        self.slots.free(indices)

    def get_pool(self, name):
        return None  # no Mamba or SWA host pool: full attention alone

    def destroy(self) -> None:
        return None


def install(cache, allocator, host_size: int, policy: str = "write_back") -> HostSlots:
    """What `init_hicache` sets for `policy` in cache mode, with the stand-ins."""
    slots = HostSlots(host_size)
    cache.cache_controller = StandInController(slots, allocator, policy)
    cache.host_pool_group = StandInPoolGroup(slots)
    full = cache.components[next(iter(cache.components))]
    full._full_kv_pool_host = slots
    cache.tree_core.set_hicache_enabled()
    cache.host_memory_mode = "cache"
    cache.write_through_threshold = 1 if policy == "write_through" else 2
    cache.is_write_back = policy == "write_back"
    cache.load_back_threshold = 10  # init_hicache's
    # a write-back drop under host pressure is logged as a warning each time: the judge counts it
    logging.getLogger(type(cache).__module__).setLevel(logging.ERROR)
    return slots


class HostDriver(UnifiedDriver):
    """The unified driver with the host tier installed (`host_size` host slots). With the Rust
    core, a second cache with the Python core (`twin`) gets the same calls: the node read the
    judge checks is the Python core's (the Rust core shows no nodes), and the Rust core is held
    to it by every answer and both pools in order (`host_state`'s "cores")."""

    def __init__(self, cls, page_size, size, policy, events, rows, context, device="cpu",
                 poison_keys=True, core=None, host_size: int = 0,
                 host_policy: str = "write_back"):
        super().__init__(cls, page_size, size, policy, events, rows, context, device,
                         poison_keys, core)
        self.host = install(self.cache, self.allocator, host_size, host_policy)
        self.twin, self.answers = None, []
        if core == "rust":
            self.twin = HostDriver(cls, page_size, size, policy, events, rows, context, device,
                                   poison_keys, "python", host_size, host_policy)

    def core(self) -> dict:
        core = super().core()
        if self.twin is not None:
            twin = self.twin.core()
            core["twin"] = {"backend": twin["backend"], "built": twin["built"],
                            "rust": twin["rust"]}
        return core

    def _both(self, method: str, *args):
        """The call on this cache, and on the twin where there is one (its answer kept for
        the next state read)."""
        answer = self._acked(method, *args)
        if self.twin is not None:
            self.answers.append([method, answer, self.twin._acked(method, *args)])
        return answer

    def _acked(self, method: str, *args):
        """The call, then its write-through backups' acks drained (`writing_check`, as the
        scheduler's next `check_hicache_events` does): no backup is in flight between ops."""
        answer = getattr(self, f"_{method}")(*args)
        queue = self.cache.cache_controller.ack_write_queue
        if queue:
            self.cache.writing_check(finish_count=len(queue))
        return answer

    def host_insert(self, tokens, ns: int):
        return self._both("host_insert", tokens, ns)

    def host_match(self, tokens, ns: int, load: bool) -> list:
        return self._both("host_match", tokens, ns, load)

    def host_pin(self, tokens, ns: int, num_tokens: int) -> list:
        return self._both("host_pin", tokens, ns, num_tokens)

    def host_evict(self, num_tokens: int) -> int:
        return self._both("host_evict", num_tokens)

    def host_prefetch(self, tokens, ns: int) -> list:
        return self._both("host_prefetch", tokens, ns)

    def host_pressure(self, num_tokens: int) -> int:
        return self._both("host_pressure", num_tokens)

    def reset(self) -> None:
        super().reset()  # the cache's reset clears the controller and the host pool too
        if self.twin is not None:
            self.twin.reset()

    def _aligned(self, tokens) -> list:
        return list(tokens)[:len(tokens) // self.page_size * self.page_size]

    def _host_insert(self, tokens, ns: int):
        """Slots for the key's whole pages (the allocator's shortfall evicted first, as its
        `evict_to_free_tokens` does), then `insert`: the length the tree had, or None when
        the slots could not be had."""
        tokens = self._aligned(tokens)
        if not tokens:
            return 0
        short = len(tokens) - int(self.allocator.available_size())
        if short > 0:
            self.cache.evict_for_alloc(self.EvictParams(num_tokens=short))
        slots = self.allocator.alloc(len(tokens))
        if slots is None:
            return None
        return self.insert(tokens, ns, 0, int_list(slots))

    def _host_match(self, tokens, ns: int, load: bool) -> list:
        """[device hit, host hit, loaded, device hit after]: `match_prefix`, and with `load` the
        host part loaded back as `init_load_back` does (`load_back` of the match's deepest
        node, its ack drained by `loading_check`) and the key matched again."""
        tokens = self._aligned(tokens)
        result = self.cache.match_prefix(self.MatchParams(key=self._key(tokens, ns)))
        device, host = int(result.device_prefix_len), int(result.host_hit_length)
        loaded = False
        if load and host:
            loaded = bool(self.cache.load_back(result.best_match_node))
            self.cache.loading_check(finish_count=len(self.cache.cache_controller.ack_load_queue))
        after = int(self.cache.match_prefix(self.MatchParams(key=self._key(tokens, ns)))
                    .device_prefix_len)
        return [device, host, loaded, after]

    def _host_pin(self, tokens, ns: int, num_tokens: int) -> list:
        """A host lock on the match's deepest node (`inc_host_lock_ref`, as a load-back anchors
        it), host pressure of `num_tokens` while it is held, then the lock dropped:
        [the node's path length, whether it had host KV, whether it kept it, tokens freed]."""
        tokens = self._aligned(tokens)
        result = self.cache.match_prefix(self.MatchParams(key=self._key(tokens, ns)))
        node, core = result.best_match_node, self.cache.tree_core
        length = int(result.device_prefix_len) + int(result.host_hit_length)
        if not length or core.is_root(node):
            return [0, False, False, 0]
        had = bool(core.is_backuped(node))
        receipt = self.cache.inc_host_lock_ref(node).to_dec_params()
        freed = int(self.cache.evict_host(num_tokens))
        kept = bool(core.is_backuped(node))
        self.cache.dec_host_lock_ref(node, receipt)
        return [length, had, kept, freed]

    def _host_prefetch(self, tokens, ns: int) -> list:
        """A storage prefetch of the key's miss, from a stand-in storage that holds every key,
        completed at once: what `prefetch_from_storage` then `_handle_prefetch_result` ask of
        the tree in cache mode (the match's last host node locked on the host as the anchor,
        host slots for the miss, host pressure for them where short, `insert_host` of the
        fetched tokens with a hash per page, the part the tree already had freed, the anchor
        released). [matched, fetched, inserted; -1 when the host had no room]."""
        tokens = self._aligned(tokens)
        result = self.cache.match_prefix(self.MatchParams(key=self._key(tokens, ns)))
        matched = int(result.device_prefix_len) + int(result.host_hit_length)
        miss, anchor, core = tokens[matched:], result.last_host_node, self.cache.tree_core
        # the scheduler's gate (`_prefetch_kvcache`, cache mode): an anchor not on the host
        # (nor the root) means a storage miss, so no prefetch is made
        if not miss or not (core.is_backuped(anchor) or core.is_root(anchor)):
            return [matched, len(miss), 0]
        receipt = self.cache.inc_host_lock_ref(anchor).to_dec_params()
        short = len(miss) - self.host.available_size()
        if short > 0:
            self.cache.evict_host(short)
        host = self.host.alloc(len(miss))
        if host is None:
            self.cache.dec_host_lock_ref(anchor, receipt)
            return [matched, len(miss), -1]
        # a hex digest per page, as the storage's keys are (KV events read their first 16)
        hashes = [hashlib.sha256(repr((ns, tokens[:matched + i + self.page_size])).encode())
                  .hexdigest() for i in range(0, len(miss), self.page_size)]
        inserted = self.cache.tree_core.insert_host(anchor, self._key(miss, ns), host, hashes)
        self.cache._apply_cache_actions(inserted.cache_actions)
        if inserted.host_insert_dropped:
            self.host.free(host)
            fetched = 0
        else:
            self.host.free(host[:inserted.prefix_len])
            fetched = len(miss) - int(inserted.prefix_len)
        self.cache.dec_host_lock_ref(anchor, receipt)
        return [matched, len(miss), fetched]

    def _host_evict(self, num_tokens: int) -> int:
        """`evict_for_alloc`: under write-back, each device leaf backed up then demoted."""
        return int(self.cache.evict_for_alloc(self.EvictParams(num_tokens=num_tokens))
                   .num_tokens_evicted)

    def _host_pressure(self, num_tokens: int) -> int:
        """`evict_host`: settled duplicates reclaimed first, then host leaves."""
        return int(self.cache.evict_host(num_tokens))

    def pools(self) -> dict:
        """What either core shows of both pools: the host and device free lists in order, the
        Full sizes. (Not the duplicate-reclaim digest: it hashes node ids, which differ between
        the cores.)"""
        return {"host_free": list(self.host.free_slots),
                "device_free": int_list(self.allocator.free_pages),
                "evictable": int(self.cache.evictable_size()),
                "protected": int(self.cache.protected_size())}

    def host_state(self) -> dict:
        """Every node (not the root) by its path: its Full device and host slots, locks, child
        count, whether its parent is on the device; the host pool's free slots and size, the
        device pool's size and free count, the Full sizes. With a twin: the twin's nodes and
        pools (this core shows no nodes), and "cores": both cores' pools and the answers since
        the last read."""
        # the scheduler's idle check (`Scheduler.self_check_during_idle`): the release's own
        # invariants of the tree, leaf sets, LRU lists and sizes; an AssertionError is the
        # state read's crash
        self.cache.sanity_check()
        if self.twin is not None:
            state = self.twin.host_state()
            state["cores"] = {"answers": self.answers, "rust": self.pools(),
                              "python": self.twin.pools()}
            self.answers = []
            return state
        core = self.cache.tree_core
        nodes = []
        stack = list(core.root_node.children.values())
        while stack:
            node = stack.pop()
            data = node.component_data[self.FULL]
            nodes.append({
                "path": [node.key.extra_key, _path_tokens(node)],
                "device": None if data.value is None else int_list(data.value),
                "host": None if data.host_value is None else int_list(data.host_value),
                "lock": int(data.lock_ref), "host_lock": int(data.host_lock_ref),
                "children": len(node.children),
                "parent_device": node.parent is core.root_node or
                node.parent.component_data[self.FULL].value is not None})
            stack.extend(node.children.values())
        return {"nodes": nodes, "host_free": list(self.host.free_slots),
                "host_size": self.host.size, "device_free": int(self.allocator.available_size()),
                "device_size": int(self.allocator.size),
                "evictable": int(self.cache.evictable_size()),
                "protected": int(self.cache.protected_size()),
                "load_back_threshold": int(self.cache.load_back_threshold),
                "write_back": bool(self.cache.is_write_back)}


def _path_tokens(node) -> list:
    parts = []
    while node.parent is not None:
        parts.append(list(node.key.token_ids))
        node = node.parent
    return [token for part in reversed(parts) for token in part]
