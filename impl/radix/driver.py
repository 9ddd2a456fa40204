"""Drives a prefix cache with SGLang `RadixCache`'s interface (sglang 0.5.23) as its scheduler does,
with the released allocator in the loop (`TokenToKVPoolAllocator` at page size 1,
`PagedTokenToKVPoolAllocator` above) and request rows as the scheduler keeps them
(`requests.py`), in plain ints: tokens go in as `RadixKey`s, slots as int64 tensors, and results
and state come out as ints, lists and floats (`reader.py`). Tensors stay here.

The caller owns what it passes in: after every call the driver writes `POISON` over each tensor
it passed (an insert's value) and over the token array of its key, and over a released
request's row, as a scheduler reuses them."""

from __future__ import annotations

import importlib
import inspect
from array import array

import torch

from kvfuzz.impl.changed_reads import ChangedReads
from kvfuzz.impl.radix.digest import light
from kvfuzz.impl.radix.ints import int_list
from kvfuzz.impl.poison import POISON
from kvfuzz.impl.radix.legacy import calls_for
from kvfuzz.impl.radix.reader import snapshot
from kvfuzz.impl.radix.requests import Request, Rows


def _sglang(module: str, name: str):
    return getattr(importlib.import_module(f"sglang.srt.mem_cache.{module}"), name)


def _allocator(module: str, name: str):
    """An allocator class from `mem_cache/allocator/<module>.py`, or, before SGLang 0.5.13, from
    the one module `mem_cache/allocator.py` that held them all."""
    found = importlib.import_module("sglang.srt.mem_cache.allocator")
    if hasattr(found, "__path__"):  # the package
        found = importlib.import_module(f"sglang.srt.mem_cache.allocator.{module}")
    return getattr(found, name)


def _defined_beside(cls, name: str):
    """`name` in the module of `cls` or of a base class (a mutant's copy of SGLang's module has
    its own, edited, RadixKey), read through the methods' globals."""
    for klass in getattr(cls, "__mro__", ()):
        for member in vars(klass).values():
            found = getattr(member, "__globals__", {}).get(name)
            if isinstance(found, type):
                return found
    return None


def extra_key(ns: int) -> str | None:
    """The `extra_key` that stands for namespace `ns` (0: none)."""
    return f"ns{ns}" if ns else None


def matched_len(result) -> int:
    """The matched prefix's length: `device_prefix_len`, or, where a release's `MatchResult`
    has none (SGLang before 0.5.22), the length of its `device_indices` (the matched slots)."""
    if hasattr(result, "device_prefix_len"):
        return int(result.device_prefix_len)
    return len(result.device_indices)


class RadixDriver(ChangedReads):
    def __init__(self, cls, page_size: int, size: int, policy: str, events: bool, rows: int,
                 context: int, device: str = "cpu", poison_keys: bool = True,
                 **cache_options):
        """`cache_options`: more `CacheInitParams` fields (the unified cache's components)."""
        self.page_size, self.device, self.poison_keys = page_size, device, poison_keys
        self.allocator = self._build_allocator(cls, size, page_size, device)
        self.rows = Rows(rows, context, device)
        # a unified cache with the Mamba component passes its hybrid pool instead of the rows
        cache_options.setdefault("req_to_token_pool", self.rows)
        params = _sglang("cache_init_params", "CacheInitParams")(
            disable=False, token_to_kv_pool_allocator=self.allocator, page_size=page_size,
            eviction_policy=policy, enable_kv_cache_events=events, **cache_options)
        self.Key = _defined_beside(cls, "RadixKey") or _sglang("radix_cache", "RadixKey")
        self.MatchParams = _sglang("base_prefix_cache", "MatchPrefixParams")
        self.InsertParams = _sglang("base_prefix_cache", "InsertParams")
        self.EvictParams = _sglang("base_prefix_cache", "EvictParams")
        self.requests: dict[int, Request] = {}
        self.live: set[int] = set()  # requests admitted since the last reset
        self.passed: list[torch.Tensor] = []  # every tensor handed over, kept for the alias check
        self.params = params
        self.cache = cls(params)
        # the scheduler's calls, mapped onto what the installed release has (legacy.py)
        self.calls = calls_for(self.cache, self.allocator, self.rows)
        self.key_limit = "limit" in inspect.signature(self.Key).parameters

    def _build_allocator(self, cls, size: int, page_size: int, device: str):
        if page_size == 1:
            return _allocator("token", "TokenToKVPoolAllocator")(
                size, torch.float16, device, None, False)
        return _allocator("paged", "PagedTokenToKVPoolAllocator")(
            size, page_size, torch.float16, device, None, False)

    def _key(self, tokens, ns: int, limit: int | None = None):
        if not self.key_limit:  # a RadixKey without `limit` (0.5.11): the tokens cut instead
            return self.Key(array("q", tokens if limit is None else tokens[:limit]),
                            extra_key(ns))
        return self.Key(array("q", tokens), extra_key(ns), limit=limit)

    def _poison_key(self, key) -> None:
        if self.poison_keys:
            key.token_ids[:] = array("q", [POISON] * len(key.token_ids))

    def _lock(self, node):
        return self.calls.lock(node)

    def _seen(self, node, tokens, extra) -> None:
        """A call answered with `node`, which lies on the path of `tokens` (in namespace
        `extra`): a driver that names nodes by path records it (impl/unified/driver.py)."""

    # -- the scheduler's calls ----------------------------------------------------------------
    def admit_match(self, rid: int, tokens, prompt: int, ns: int, priority: int) -> list:
        """`match_prefix` of the prompt, never its last token; the matched slots into the row."""
        request = Request(rid, tokens, prompt, extra_key(ns), priority, self.rows.take())
        self.requests[rid] = request
        self.live.add(rid)
        key = self._key(request.tokens[:prompt], ns, limit=prompt - 1)
        result = self.cache.match_prefix(self.MatchParams(key=key, req=request))
        self._poison_key(key)
        request.prefix_len, request.last_node = matched_len(result), result.last_device_node
        # the scheduler keeps where an SWA cache's match says the request's branch starts
        request.swa_branching_seqlen = getattr(result, "swa_branching_seqlen", None)
        self._seen(request.last_node, request.tokens[:prompt - 1], request.extra_key)
        path = self.path(request.last_node)
        matched = path[:request.prefix_len]
        self.rows.write((request.kv.req_pool_idx, slice(0, len(matched))), matched)
        request.kv.cache_protected_len = len(matched)
        request.grow(len(matched))
        return [request.prefix_len, int_list(path)]

    def path(self, node):
        """The slots from the root down to `node`: `path_device_indices`, or, in a release
        without it (before SGLang 0.5.22), the node values read up the parents (the same
        concatenation, root first)."""
        if callable(getattr(self.cache, "path_device_indices", None)):
            return self.cache.path_device_indices(node)
        values, root = [], self.cache.root_node
        while node is not root and node is not None and len(values) < 1 << 16:
            values.append(node.value)
            node = node.parent
        return torch.cat(values[::-1]) if values else torch.empty(0, dtype=torch.int64)

    def admit_lock(self, rid: int) -> None:
        request = self.requests[rid]
        request.lock = self._lock(request.last_node)

    def evict(self, num_tokens: int) -> int:
        return int(self.cache.evict(self.EvictParams(num_tokens=num_tokens)).num_tokens_evicted)

    def extend(self, rid: int, count: int, decode: bool = False):
        """Slots for the request's next `count` tokens, written into its row (None: refused):
        `alloc` at page size 1, above it `alloc_decode` for a decode step, else `alloc_extend`,
        `last_loc` read from the row."""
        request, ps = self.requests[rid], self.page_size
        row, filled = request.kv.req_pool_idx, request.filled
        last = torch.tensor([int(self.rows.req_to_token[row, filled - 1]) if filled else -1])
        seq = torch.tensor([filled + count])
        if ps == 1:
            slots = self.allocator.alloc(count)
        elif decode:
            slots = self.allocator.alloc_decode(seq, seq.clone(), last)
        else:
            prefix = torch.tensor([filled])
            slots = self.allocator.alloc_extend(prefix, prefix.clone(), seq, seq.clone(), last,
                                                count)
        if slots is None:
            return None
        got = int_list(slots)
        self.rows.write((row, slice(filled, filled + len(got))), slots)
        request.grow(len(got))
        return got

    def checkpoint(self, rid: int, finishing: bool = False) -> int:
        """`finishing`: the request's finish, which before SGLang 0.5.22 was a call of its own
        (cache_finished_req, insert_req: legacy.py); the judge says so only there."""
        request = self.requests[rid]
        protected = self.calls.checkpoint(request, finishing)
        self._seen(request.last_node, request.tokens[:request.filled], request.extra_key)
        return protected

    def release(self, rid: int, checkpointed: bool = True) -> None:
        """`free_kv_row` of the request's own slots, `unlock`, its row freed (`checkpointed`:
        whether the finish inserted it first, which a unified cache's `on_release` reads)."""
        request = self.requests.pop(rid)
        self.live.discard(rid)
        self.calls.release(request)
        self.rows.release(request.kv.req_pool_idx)

    def release_stale(self, rid: int) -> None:
        """A request from before a reset drops its lock of the old tree."""
        self.calls.unlock(self.requests.pop(rid).lock)

    def match(self, tokens, ns: int) -> list:
        key = self._key(tokens, ns)
        result = self.cache.match_prefix(self.MatchParams(key=key))
        self._poison_key(key)
        self._seen(result.last_device_node, tokens, extra_key(ns))
        path = self.path(result.last_device_node)
        return [matched_len(result), int_list(path)]

    def touch(self, tokens, ns: int) -> None:
        key = self._key(tokens, ns)
        self.calls.touch(key, self.MatchParams)
        self._poison_key(key)

    def pin(self, tokens, ns: int) -> list[int]:
        """Match, lock, read the lock counts up the path (deepest first), unlock."""
        node = self.cache.match_prefix(self.MatchParams(key=self._key(tokens, ns))) \
            .last_device_node
        lock = self._lock(node)
        counts, walk = [], node
        while walk is not self.cache.root_node and walk is not None and len(counts) < 1 << 16:
            counts.append(int(walk.lock_ref))
            walk = walk.parent
        self.calls.unlock(lock)
        return counts

    def alloc_slots(self, count: int):
        return int_list(self.allocator.alloc(count))

    def insert(self, tokens, ns: int, priority: int, slots) -> int:
        """`insert(key, value)` with the caller's tensor of `slots`: the length already cached.
        A release whose `RadixKey` has no `page_aligned` (0.5.10) inserts the key as given, and
        its callers cut it to whole pages first (`page_align_keys`): so does the driver there."""
        if not hasattr(self.Key, "page_aligned"):
            aligned = len(tokens) // self.page_size * self.page_size
            tokens, slots = tokens[:aligned], list(slots)[:aligned]
        value = torch.tensor(list(slots), dtype=torch.int64, device=self.device)
        self.passed.append(value)
        key = self._key(tokens, ns)
        result = self.cache.insert(self.InsertParams(key=key, value=value, priority=priority))
        value.fill_(POISON)
        self._poison_key(key)
        # (an InsertResult of SGLang before 0.5.13 has the length alone)
        self._seen(getattr(result, "last_device_node", None), tokens, extra_key(ns))
        return int(result.prefix_len)

    def free_slots(self, slots) -> None:
        index = torch.tensor(list(slots), dtype=torch.int64, device=self.device)
        self.allocator.free(index)
        index.fill_(POISON)

    def reset(self) -> None:
        """The scheduler's flush: the cache, the allocator, the rows."""
        self.cache.reset()
        self.allocator.clear()
        self.rows.clear()
        self.live.clear()

    # -- state --------------------------------------------------------------------------------
    def snapshot(self) -> dict:
        return snapshot(self)

    def snapshot_since(self, since: int):
        """`snapshot()` as what changed since read `since` (`ChangedReads`)."""
        return self.changed("snapshot", since, self.snapshot())

    def light_since(self, since: int):
        """The light read (`digest.light`: sizes, rows, the nodes' digest) as what changed."""
        return self.changed("light", since, light(self))


def warm_up(cls) -> None:
    """SGLang hashes a cache's pages with a C++ extension (hicache_hash_cpp) that torch builds,
    or loads from its build folder, the first time a page is hashed: seconds, tens of them on a
    fresh machine, which belong to no input. Done here, before any input is timed."""
    try:
        from sglang.srt.mem_cache.cpp_utils.native_hash import _load_native_hash_module
    except ImportError:  # a release that hashes in Python
        return
    _load_native_hash_module()
