"""Upstream SGLang 0.5.23's `MultiEndedAllocator` (allocator/unified_sub_pool.py) as a compaction
implementation: a grow-up and (two-ended) a grow-down pool on one `UnifiedKVPool` byte buffer,
`lazy_compaction=True` or `False`, behind the factory interface the lock step calls
(`impl/compaction/allocator.py`). What maps to what, and where upstream's contract differs from
../shared/spec/lazy-compaction.md: docs/upstream-sglang.md.

Geometry: kvfuzz's pages are `epp` bytes; upstream entries are multiples of 32 bytes, so every
byte is scaled by K = 32 x page_size (page formulas are unchanged by a common scale) and a page
is `page_size` MHA entries of `layer_num = epp`, one head of 8 bf16 (2 x 16 bytes per layer).
The reserved floor (`sink_bytes`) overrides the buffer's minimum slot index before the
allocators read it (in slots: the reserved pages times the page size). KV rows are upstream's
bytes, a page's envelope at a time: `write` tiles each kvfuzz byte K times, `read_live` reads
them back.

Page size: the class's `alloc`, `free`, `alloc_physical` and `cancel_physical_reservation` take
and return tokens, and are called with what the judge passes and returned as they come back
(the oracle expands pages into tokens); `available_size()` is in tokens, the tables in pages.

Events and streams: a forward's event is a host object whose `query()` says whether `fire`
happened; upstream's `torch.cuda.current_stream().wait_event` calls are no-ops during each call
(CPU torch has no CUDA streams). Private names used (those every release since 0.5.15 has) are
checked at import.

Releases: written for 0.5.23; 0.5.15-0.5.19 kept the class in `mem_cache/multi_ended_allocator.py`
and had no public urgent flush (`urgent_flush`), and what else differs is read from the class
(`hole_take`) or is a finding (docs/release-history.md G, N). Before 0.5.15: one line, not there.
"""

from __future__ import annotations

import contextlib
import functools
import importlib

import torch

from kvfuzz.impl.compaction.released import UPSTREAM_POOLS
from kvfuzz.impl.driver_calls import POISON
from kvfuzz.impl.registry import ImplementationError, installed_release, load_first
from kvfuzz.impl.upstream_env import prepare_import
from kvfuzz.strategies.compaction.trace import PoolSnapshot

# Where the class is: 0.5.20 on in allocator/unified_sub_pool.py, 0.5.15-0.5.19 in
# mem_cache/multi_ended_allocator.py (the first found; neither: one "not supported" line).
MultiEndedAllocator = load_first(UPSTREAM_POOLS, "sglang")
with prepare_import("sglang"):
    _ump = importlib.import_module("sglang.srt.mem_cache.unified_memory_pool")

K = 32  # upstream bytes per kvfuzz byte at page size 1 (a page: one entry of 32 x epp bytes)
# Private names the adapter reads, which every release with the class has (0.5.15 on).
_PRIVATE = ("_drain_pending_reuse", "flush_opportunistic", "set_inflight_forward",
            "set_latest_forward_done_event", "translate_kv_loc", "_allocated_pages", "_flush")
_missing = [name for name in _PRIVATE if not hasattr(MultiEndedAllocator, name)]
if _missing:
    raise ImplementationError(f"not supported: sglang {installed_release('sglang')}: "
                              f"MultiEndedAllocator has no {', '.join(_missing)}")


class _Event:
    """A forward's done-event: fired when the trace says so."""

    def __init__(self, ident: int):
        self.ident, self.fired = ident, False

    def query(self) -> bool:
        return self.fired


class _NoStream:
    def wait_event(self, event) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass


@contextlib.contextmanager
def _no_streams():
    saved = torch.cuda.current_stream
    torch.cuda.current_stream = lambda *args, **kwargs: _NoStream()
    try:
        yield
    finally:
        torch.cuda.current_stream = saved


def _spec(name: str, epp: int):
    return _ump.MHASubPoolSpec(name=name, layer_num=epp, grow_direction=name, head_num=1,
                               head_dim=8, store_dtype=torch.bfloat16)


def hole_take(allocator_class) -> str:
    """Which freed pages a lazy allocation reuses, read from the release (the oracle's `TAKES`):
    0.5.23 sorts them and takes those nearest the pool's own end (`_take_free_pages_from_end`:
    "base_end"); 0.5.20-0.5.22 take the front of `_free_phys_pages`, the holes in the order
    they were freed (the spec's step 3, "front"). A change of policy, not a bug of either
    (docs/release-history.md G)."""
    return "base_end" if hasattr(allocator_class, "_take_free_pages_from_end") else "front"


def urgent_flush(pool):
    """The pool's urgent flush: `flush_for_allocation` (0.5.20 on); before, the release called
    `_flush(urgent=True)` itself, as its peer's allocation-pressure path does (0.5.15-0.5.19).
    The same pass either way: 0.5.20's public method only wraps it."""
    public = getattr(pool, "flush_for_allocation", None)
    return public if public is not None else functools.partial(pool._flush, urgent=True)


class UpstreamCompaction:
    # Its pool is an MHA pool, whose pages `_maybe_zero_pages` zeroes as they are handed out
    # (0.5.23; before, MLA pools only: docs/release-history.md N).
    zeroes_new_pages = True

    def __init__(self, params, lazy: bool, device: str = "cpu", allocator_class=None,
                 zeroes: bool = True):
        """`allocator_class`: upstream's `MultiEndedAllocator` unless given (a mutant of it).
        `zeroes=False`: the fresh-page property not claimed (`lazy_unzeroed`)."""
        self.params, self.lazy, self.device = params, lazy, device
        self.page_size = size = params.page_size
        self.scale = K * size  # upstream bytes per kvfuzz byte: a page is `size` entries
        allocator_class = allocator_class or MultiEndedAllocator
        self.hole_take = hole_take(allocator_class)
        self.zeroes_new_pages = zeroes
        epp = {"up": params.epp_up, "down": params.epp_down}
        self.buf = _ump.UnifiedKVPool(total_bytes=self.scale * params.total_bytes,
                                      device=device, page_size=size, enable_memory_saver=False,
                                      sub_pool_specs=[_spec(name, epp[name]) for name in epp])
        for name in epp:  # the reserved floor: ceil(sink_bytes / epp) pages, in slots
            self.buf._min_slot_index[name] = -(-params.sink_bytes // epp[name]) * size
        self.pools, self.events, self._eager_inflight = {}, {}, {}
        # The load-back reservations this caller holds, per pool (the class keeps only their
        # count, `_pending_hicache_load_pages`): what `release` gives back, what a clear voids.
        self.reservations: dict[str, list[list[int]]] = {name: [] for name in params.pools()}
        for name in params.pools():  # single-ended: no down allocator, no peer
            kvcache = _ump.UnifiedMHATokenToKVPool(unified_buffer=self.buf, sub_pool_name=name,
                                                   page_size=size)
            pool = allocator_class(kvcache=kvcache, unified_buffer=self.buf,
                                   sub_pool_name=name, device=device, is_id_owner=True,
                                   lazy_compaction=lazy, **_paged(size))
            pool._lazy_max_moves_per_call = params.move_cap
            self.pools[name] = pool
        if params.two_ended:
            self.pools["up"].bind_peer(self.pools["down"])
            self.pools["down"].bind_peer(self.pools["up"])

    def _ids(self, values) -> torch.Tensor:
        return torch.tensor(list(values), dtype=torch.int64, device=self.device)

    def _tokens(self, pages) -> list[int]:
        """Every token of each page (what a forward's `out_cache_loc` names)."""
        size = self.page_size
        return [page * size + offset for page in pages for offset in range(size)]

    def avail(self, name: str) -> int:
        """In pages: `available_size()` counts tokens (pages x page size)."""
        tokens = int(self.pools[name].available_size())
        if tokens % self.page_size:
            raise AssertionError(f"{name}: available_size() {tokens} is not a whole number of "
                                 f"pages of {self.page_size} tokens")
        return tokens // self.page_size

    def alloc(self, name: str, num_tokens: int):
        with _no_streams():
            out = self.pools[name].alloc(num_tokens)
        return None if out is None else out.tolist()

    def free(self, name: str, tokens) -> None:
        index = self._ids(tokens)
        with _no_streams():
            self.pools[name].free(index)
        index.fill_(POISON)  # the caller's tensor: an allocator that kept it shows -99 later

    def flush(self, name: str, urgent: bool) -> int:
        pool = self.pools[name]
        with _no_streams():
            return int(urgent_flush(pool)() if urgent else pool.flush_opportunistic())

    def drain(self, name: str, urgent: bool) -> None:
        if self.lazy:
            with _no_streams():
                self.pools[name]._drain_pending_reuse(urgent=urgent)

    def forward(self, event: int, writes: dict) -> None:
        done = self.events[event] = _Event(event)
        for name, pool in self.pools.items():
            written = self._tokens(writes.get(name, []))
            pool.set_latest_forward_done_event(done)
            pool.set_inflight_forward(done, self._ids(written) if written else None)
            self._eager_inflight[name] = (done, written)  # eager upstream keeps none

    def reserve(self, name: str, num_tokens: int):
        """HiCache's load-back reservation (`alloc_physical`, 0.5.22 on): the reserved pages'
        physical slots, kept as returned for the rollback."""
        with _no_streams():
            out = self.pools[name].alloc_physical(num_tokens)
        if out is None:
            return None
        slots = out.tolist()
        self.reservations[name].append(slots)
        return slots

    def release(self, name: str, which: str) -> None:
        """Roll the reservation back (`cancel_physical_reservation`), as HiCache does when a
        load-back cannot go ahead."""
        slots = self.reservations[name].pop(0 if which == "oldest" else -1)
        index = self._ids(slots)
        with _no_streams():
            self.pools[name].cancel_physical_reservation(index)
        index.fill_(POISON)

    def fire(self, event: int) -> None:
        self.events[event].fired = True

    def clear(self, name: str) -> None:
        """One pool's `clear()`, as SGLang's composite allocators call it on each pool."""
        with _no_streams():
            self.pools[name].clear()
        self._eager_inflight.pop(name, None)  # the adapter's stand-in for eager's write set
        self.reservations[name] = []  # what the pool reserved is free after its clear

    def free_group_begin(self, name: str) -> None:
        """The scheduler's per-step group: frees are deferred (cloned) until its end; a nested
        begin raises (`AssertionError`, nothing changed)."""
        with _no_streams():
            self.pools[name].free_group_begin()

    def free_group_end(self, name: str) -> None:
        with _no_streams():
            self.pools[name].free_group_end()

    def _pages(self, name: str) -> torch.Tensor:
        pool = self.pools[name]
        per_page = pool.entry_bytes_per_page
        return self.buf._raw[: pool.num_pages * per_page].view(pool.num_pages, per_page)

    def write(self, name: str, vids, payloads) -> None:
        pages = self._translate_pages(name, vids)
        rows = torch.frombuffer(bytearray(b"".join(payloads)), dtype=torch.uint8)
        self._pages(name)[pages] = rows.view(len(vids), -1).repeat_interleave(
            self.scale, 1).to(self.buf._raw.device)

    def _translate_pages(self, name: str, vids) -> torch.Tensor:
        """The physical pages of `vids` by `translate_kv_loc` of all their tokens, which must
        land on whole pages (`physical(t) = v2p[t // ps] * ps + t % ps`)."""
        size = self.page_size
        slots = self.pools[name].translate_kv_loc(self._ids(self._tokens(vids)))
        pages = slots.view(-1, size)[:, 0] // size
        offsets = torch.arange(size, dtype=slots.dtype, device=slots.device)
        if not torch.equal(slots.view(-1, size), pages[:, None] * size + offsets):
            raise AssertionError(f"{name}: translate_kv_loc of vids {list(vids)[:4]}... gave "
                                 f"slots {slots.tolist()[:4 * size]}..., not whole pages")
        return pages

    def read_live(self, name: str) -> dict:
        v2p = self.pools[name].virtual_to_physical[:-1].tolist()
        return self._rows(name, [(vid, page) for vid, page in enumerate(v2p) if page > 0])

    def read_vids(self, name: str, vids) -> dict:
        """The rows of `vids` alone (what `zeroes_new_pages` is checked on, after each alloc)."""
        pages = self.pools[name].virtual_to_physical[list(vids)].tolist()
        return self._rows(name, [(vid, page) for vid, page in zip(vids, pages) if page > 0])

    def _rows(self, name: str, live: list) -> dict:
        if not live:
            return {}
        # A tensor index: indexing with a Python list of 30-odd ints took torch 15 ms here.
        index = torch.tensor([page for _, page in live], dtype=torch.int64, device=self.device)
        rows = self._pages(name).index_select(0, index).cpu().view(len(live), -1, self.scale)
        # Each kvfuzz byte is K equal bytes; a torn group reads back raw (I7 then fails). All
        # pages at once: a few tensor ops per read, not per page (this read ran after every op
        # and was half of the implementation's side).
        whole = (rows == rows[:, :, :1]).flatten(1).all(1).tolist()
        width = rows.shape[1]
        firsts = rows[:, :, 0].flatten().tolist()
        return {vid: bytes(firsts[i * width:(i + 1) * width]) if whole[i]
                else bytes(rows[i].flatten().tolist()) for i, (vid, _) in enumerate(live)}

    def snapshot(self, name: str) -> PoolSnapshot:
        pool = self.pools[name]
        inflight = pool._inflight_forward if self.lazy else self._eager_inflight.get(name)
        written = () if inflight is None or inflight[0].query() else inflight[1]
        return PoolSnapshot(
            wm=int(pool.watermark_physical),
            live=int(pool.live_page_count) if self.lazy else pool._allocated_pages(),
            avail=self.avail(name),
            num_moves=sum(int(sources.numel()) for sources, _, _ in pool._inverse_history),
            holes=tuple(sorted(pool._free_phys_pages.tolist())),
            pending=tuple(sorted((event.ident, tuple(sorted(pages)))
                                 for event, (pages, _) in pool._pending_reuse.items())),
            pending_set=tuple(sorted(pool._pending_reuse_pages_cpu)),
            inflight=self._pages_named(written.tolist() if torch.is_tensor(written) else written),
            free_vids=tuple(pool.free_virtual_ids.tolist()),
            v2p=tuple(pool.virtual_to_physical.tolist()),
            p2v=tuple(pool.physical_to_virtual.tolist()),
            group=_group(pool, self._pages_named),
            reserved=tuple(sorted(self._pages_named(slot for slots in self.reservations[name]
                                                    for slot in slots))),
            loading=int(getattr(pool, "_pending_hicache_load_pages", 0)))


    def _pages_named(self, tokens) -> tuple[int, ...]:
        """The pages tokens fall in, each once, in the order first named (the snapshot speaks
        pages)."""
        return tuple(dict.fromkeys(token // self.page_size for token in tokens))


def _paged(size: int) -> dict:
    """The allocator's page size, passed only above 1: releases before page-size support take
    no such argument, and every trace of theirs has pages of one token."""
    return {} if size == 1 else {"page_size": size}


def _group(pool, pages_named):
    """The open free group's deferred vids (the pages its deferred tokens fall in, or, for
    `free_page_reps_group`, one token of each page), None if none is open. From 0.5.19 a group
    is open while `free_group` (frees) or `free_page_reps_group` (`free_segment`'s page
    representatives, 0.5.20 on) is a list: they open and close together, so either open is a
    group open; 0.5.15-0.5.17 keep `free_group` a list always and say
    whether a group is open by `is_not_in_free_group`."""
    if hasattr(pool, "is_not_in_free_group"):
        parts = [None if pool.is_not_in_free_group else pool.free_group]
    else:
        parts = [getattr(pool, name, None) for name in ("free_group", "free_page_reps_group")]
    if all(part is None for part in parts):
        return None
    return pages_named(token for part in parts for chunk in part or ()
                       for token in chunk.tolist())


def lazy(params, device: str = "cpu") -> UpstreamCompaction:
    return UpstreamCompaction(params, True, device)


def lazy_unzeroed(params, device: str = "cpu") -> UpstreamCompaction:
    """The lazy class with every check but the fresh page's: on 0.5.20-0.5.22, whose MHA pages
    are handed out unzeroed (N), every lazy trace stops at that check; this pass sees the rest."""
    return UpstreamCompaction(params, True, device, zeroes=False)


def eager(params, device: str = "cpu") -> UpstreamCompaction:
    return UpstreamCompaction(params, False, device)


def eager_unzeroed(params, device: str = "cpu") -> UpstreamCompaction:
    """The eager class without the fresh-page check: on 0.5.15-0.5.22 an eager free hands the
    vacated pages back with their rows too (N), and every eager trace stops there."""
    return UpstreamCompaction(params, False, device, zeroes=False)
