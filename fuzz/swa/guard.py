"""`kvfuzz.guard` and `kvfuzz.record` of a live SGLang `SWATokenToKVPoolAllocator` (a full and a
sliding-window pool, every full slot of a live token mapped to its SWA slot): the object an
engine's scheduler, SWA prefix cache and model runner call, wrapped so that each call becomes
an op of an `swa` trace as it happens and, guarding, is checked in lock step with the oracle:
the slots handed out (exactly), the three available sizes, both pools' free lists and staged
pages, the mapping, and the invariants (each pool's pages free, staged, pending in a group or
held by the engine, once; the mapping pairing exactly the engine's full slots that keep a peer,
with distinct SWA slots at the same in-page offset).

The engine's calls carry lengths and slots, not requests, so they map onto the trace's by-slot
ops: `alloc(n)`: `alloc_slots`; `alloc_extend`, `alloc_extend_swa_tail`, `alloc_decode`:
`extend_slots`, `extend_tail_slots`, `decode_slots`; `free` / `free_swa` / `free_full`:
`free_slots` of those pools; the `*_segment` forms and `free_segments` /
`free_full_segments`: `free_segments`; `set_full_to_swa_mapping` /
`clear_full_to_swa_mapping` (the SWA prefix cache re-pairing slots it keeps): `set_mapping` /
`clear_mapping`; the releases of its pools reached past it (`allocator.full_attn_allocator.
free_segment(...)`, as SGLang's unified radix cache frees a tree value): `free_slots` /
`free_segments` of "full_pool" / "swa_pool"; `free_group_begin` / `free_group_end` / `clear`
/ `resize`: the trace's ops of those names
(a nested begin is the trace's own misuse: rejected, changing nothing). Reads go through (the
sizes, translations, budgets, KV copies; those that evict do it through the prefix cache, which
calls this wrapper). Refused (`GuardUnsupported`, before the call): any other method that changes
the allocator (`merge_and_sort_free`), a resize past the sizes it was built with, the
per-request SWA ring mode, a call at a page
size its contract excludes (`alloc` above 1, the others at 1), an allocator larger than the
format holds or used before it was guarded, and a batch whose `extend_num_tokens` is not its
lengths' sum.
"""

from __future__ import annotations

import inspect
import os

from kvfuzz.fuzz.engine.guard import (GuardedObject, GuardUnsupported, Session, modelled,
                                      open_session, plain_ints, same_args)
from kvfuzz.impl.swa.checks import DEBUG_ENV, INVARIANT_ENV, STRICT
from kvfuzz.strategies.swa.codec import MAX_BATCH, MAX_EXPANSION, MAX_PAGES, MAX_SIZE
from kvfuzz.strategies.swa.trace import (POOL_OWNERS, RELEASES, AllocSlots, Clear, ClearMapping,
                                         DecodeSlots, ExtendSlots, ExtendTailSlots, FreeSegments,
                                         FreeSlots, GroupBegin, GroupEnd, Resize, SetMapping,
                                         Trace)

READS = frozenset({
    "available_size", "full_available_size", "swa_available_size", "new_pages_available",
    "translate_loc_from_full_to_swa", "translate_swa_indices_for_transfer",
    "translate_kv_indices_for_transfer", "get_kvcache", "debug_print", "get_all_free_pages",
    "create_prefill_budget", "reclaim_for_prealloc", "swa_capacity_and_available",
    "evict_to_free_tokens", "check_decode_capacity", "request_slot_reserve",
    "max_new_tokens_for_memory", "prealloc_fits_assumes_reclaim", "prealloc_ceiling_fits",
    "prealloc_fits", "get_extend_allocation_demand", "verify_byte_accounting",
    "mamba_full_cache_donor", "_conserve_full_available_size", "_conserve_swa_available_size",
    "get_cpu_copy", "load_cpu_copy", "set_hicache_transfer_done_event"})
# Where SGLang builds its SWA allocator (`kvfuzz guard swa -- COMMAND`).
SITES = ("sglang.srt.mem_cache.kv_cache_configurator:SWATokenToKVPoolAllocator",)


def header(allocator) -> Trace:
    """The trace's settings, read from the live allocator, which must be as new."""
    def refuse(why: str):
        raise GuardUnsupported(f"kvfuzz.guard(swa): {why}")

    if getattr(allocator, "_swa_req_ring", False):
        refuse("the per-request SWA ring mode (no paged SWA pool) is not modelled")
    full, swa = allocator.full_attn_allocator, allocator.swa_attn_allocator
    page_size, size, size_swa = int(allocator.page_size), int(full.size), int(swa.size)
    for name, n in (("full", size), ("SWA", size_swa)):
        if not page_size <= n <= MAX_SIZE or n // page_size > MAX_PAGES or \
                n * page_size > MAX_EXPANSION:
            refuse(f"a {name} pool of {n} slots in pages of {page_size}: outside what the "
                   f"trace holds")
    from kvfuzz.impl.driver_calls import free_list_of, staged_of, int_list

    used = any(len(free_list_of(pool)) < pool.size // page_size or staged_of(pool)
               for pool in (full, swa))
    grouped = getattr(allocator, "free_group", None) is not None or \
        getattr(allocator, "group_open", False)  # upstream's / kvfuzz's class's open group
    if used or grouped or \
            any(int_list(allocator.full_to_swa_index_mapping[:-1])):
        refuse("the allocator has been used: guard it before its first call (the oracle starts "
               "from full free lists and an empty mapping)")
    level = os.environ.get(INVARIANT_ENV, "0").strip() or "0"
    if level not in ("0", STRICT):
        refuse(f"{INVARIANT_ENV}={level}: only off (0) and strict ({STRICT}) are modelled")
    debug = os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true")
    return Trace(page_size, size, size_swa, bool(getattr(allocator, "need_sort", False)), (),
                 debug=debug, strict=level == STRICT)


def guard(allocator, *, check: bool = True, impl=None, corpus="corpus",
          on_unsupported: str = "raise"):
    """The live `allocator`, wrapped: checked in lock step with the oracle (`check`), or only
    recorded. `impl` names it in reports (default: its class's catalogue entry). A call the
    trace cannot model raises `GuardUnsupported` (`on_unsupported="raise"`), or, with "stop",
    is said once on stderr and goes through, and so does every call after it, unchecked."""
    trace = header(allocator)
    driver = None
    if check:
        from kvfuzz.impl.swa.live import LiveSWADriver

        driver = LiveSWADriver(allocator)
    session = open_session("swa", allocator, trace, driver, impl, corpus, on_unsupported)
    return GuardedSWA(allocator, session, driver)


def _checked(guarded: GuardedObject, values: list[int], method: str) -> list[int]:
    """Slots as the trace holds them (at most the full pool and its padding page), else refused."""
    most = guarded._kvfuzz_slots
    if len(values) > most or any(not 0 <= v < most for v in values):
        guarded._refuse(f"{method} of {len(values)} values outside 0..{most - 1}")
    return values


def _release_op(guarded: GuardedObject, pools: str, method: str, segments):
    """The trace's op for a release of `segments` (index tensor, start) and its arguments."""
    plain = [(_checked(guarded, plain_ints(index), method), int(start))
             for index, start in segments]
    if len(plain) > guarded._kvfuzz_slots or any(not 0 <= s <= MAX_SIZE for _, s in plain):
        guarded._refuse(f"{method} of {len(plain)} segments outside the trace's limits")
    op = FreeSegments(tuple(v for slots, _ in plain for v in slots),
                      tuple(start for _, start in plain),
                      tuple(len(slots) for slots, _ in plain), pools)
    return op, same_args((plain,))


class GuardedPool(GuardedObject):
    """One of the allocator's two pools (`full_attn_allocator`, `swa_attn_allocator`) as the
    engine reaches it past the allocator: its releases (`free`, `free_segment`,
    `free_segments`) are the trace's "full_pool" / "swa_pool" ops, its reads go through, any
    other method is refused (allocating from a pool alone leaves the mapping unpaired)."""

    TARGET = "swa"
    READS = frozenset({"available_size", "debug_print", "get_kvcache", "get_all_free_pages",
                       "verify_byte_accounting"})

    def __init__(self, pool, session: Session, driver, which: str, slots: int):
        super().__init__(pool, session, driver)
        vars(self)["_kvfuzz_which"], vars(self)["_kvfuzz_slots"] = which, slots

    @modelled
    def free(self, free_index):
        slots = _checked(self, plain_ints(free_index), "free")
        which = self._kvfuzz_which
        return self._run(FreeSlots(tuple(slots), which), RELEASES[which, False],
                         lambda: self._kvfuzz_object.free(free_index), same_args((slots,)))

    @modelled
    def free_segment(self, free_index, *, start_pos):
        op, expected = _release_op(self, self._kvfuzz_which, "free_segment",
                                   [(free_index, start_pos)])
        return self._run(op, RELEASES[self._kvfuzz_which, True],
                         lambda: self._kvfuzz_object.free_segment(free_index,
                                                                  start_pos=start_pos),
                         expected)

    @modelled
    def free_segments(self, segments):
        segments = list(segments)
        op, expected = _release_op(self, self._kvfuzz_which, "free_segments", segments)
        return self._run(op, RELEASES[self._kvfuzz_which, True],
                         lambda: self._kvfuzz_object.free_segments(segments), expected)


class GuardedSWA(GuardedObject):
    """Stands for the allocator: the engine's calls go through `kvfuzz_session`; so do its
    calls on the allocator's pools (`full_attn_allocator`, `swa_attn_allocator`: `GuardedPool`)."""

    TARGET, READS = "swa", READS

    def __init__(self, allocator, session: Session, driver):
        super().__init__(allocator, session, driver)
        header = session.header
        state = vars(self)
        state["_kvfuzz_P"], state["_kvfuzz_slots"] = header.page_size, header.size + \
            header.page_size
        for name in ("alloc_extend", "alloc_extend_swa_tail", "alloc_decode"):
            method = getattr(allocator, name, None)
            state[f"_kvfuzz_{name}"] = None if method is None else inspect.signature(method)
        for which, attribute in POOL_OWNERS.items():
            state[f"_kvfuzz_{attribute}"] = GuardedPool(
                getattr(allocator, attribute), session, driver, which, state["_kvfuzz_slots"])

    @property
    def full_attn_allocator(self):
        return self._kvfuzz_full_attn_allocator

    @property
    def swa_attn_allocator(self):
        return self._kvfuzz_swa_attn_allocator

    # -- allocations ---------------------------------------------------------------------
    @modelled
    def alloc(self, need_size):
        allocator = self._kvfuzz_object
        if self._kvfuzz_P != 1:
            self._refuse("alloc() above page size 1 (upstream asserts page size 1)")
        n = self._count(need_size, "alloc", MAX_SIZE)
        return self._run(AllocSlots(n), "alloc", lambda: allocator.alloc(need_size),
                         same_args((n,)))

    def _lengths(self, name: str, args, kwargs):
        if self._kvfuzz_P == 1:
            self._refuse(f"{name}() at page size 1 (upstream asserts a page size above 1)")
        given = vars(self)[f"_kvfuzz_{name}"].bind(*args, **kwargs)
        values = given.arguments
        seq = plain_ints(values.get("seq_lens_cpu", values["seq_lens"]))
        prefix = [s - 1 for s in seq] if name == "alloc_decode" else \
            plain_ints(values.get("prefix_lens_cpu", values["prefix_lens"]))
        last = plain_ints(values["last_loc"])
        if not 1 <= len(seq) <= MAX_BATCH or not len(prefix) == len(seq) == len(last) or \
                any(not 0 <= q <= s <= MAX_SIZE for q, s in zip(prefix, seq)) or \
                any(not -1 <= x < self._kvfuzz_slots for x in last):
            self._refuse(f"{name} of a batch of {len(seq)} requests outside the trace's limits "
                         f"(or with a seq_len below its prefix_len)")
        tokens = values.get("extend_num_tokens")
        if tokens is not None and int(tokens) != sum(s - q for q, s in zip(prefix, seq)):
            self._refuse(f"{name} with extend_num_tokens {int(tokens)}, its lengths sum to "
                         f"{sum(s - q for q, s in zip(prefix, seq))}")
        return prefix, seq, last, values

    @modelled
    def alloc_extend(self, *args, **kwargs):
        prefix, seq, last, _ = self._lengths("alloc_extend", args, kwargs)
        op = ExtendSlots(tuple(prefix), tuple(seq), tuple(last))
        return self._run(op, "alloc_extend",
                         lambda: self._kvfuzz_object.alloc_extend(*args, **kwargs),
                         same_args((prefix, seq, last)))

    @modelled
    def alloc_extend_swa_tail(self, *args, **kwargs):
        prefix, seq, last, values = self._lengths("alloc_extend_swa_tail", args, kwargs)
        tail = int(values["swa_tail_len"])
        if len(seq) != 1 or not 0 <= tail <= seq[0] - prefix[0] or \
                (seq[0] - tail) % self._kvfuzz_P:
            self._refuse(f"alloc_extend_swa_tail of {len(seq)} requests with a tail of {tail} "
                         f"(upstream's callers: one request, a tail within its extend that "
                         f"starts at a page boundary)")
        op = ExtendTailSlots(prefix[0], seq[0], last[0], tail)
        return self._run(op, "alloc_extend_swa_tail",
                         lambda: self._kvfuzz_object.alloc_extend_swa_tail(*args, **kwargs),
                         same_args((prefix, seq, last, tail)))

    @modelled
    def alloc_decode(self, *args, **kwargs):
        _, seq, last, _ = self._lengths("alloc_decode", args, kwargs)
        if any(s < 1 for s in seq):
            self._refuse("alloc_decode with a seq_len of 0")
        return self._run(DecodeSlots(tuple(seq), tuple(last)), "alloc_decode",
                         lambda: self._kvfuzz_object.alloc_decode(*args, **kwargs),
                         same_args((seq, last)))

    # -- releases ------------------------------------------------------------------------
    @modelled
    def free(self, free_index):
        return self._free("free", "both", free_index)

    @modelled
    def free_swa(self, free_index):
        return self._free("free_swa", "swa", free_index)

    @modelled
    def free_full(self, free_index):
        return self._free("free_full", "full", free_index)

    def _free(self, method: str, pools: str, free_index):
        slots = self._slots(plain_ints(free_index), method)
        return self._run(FreeSlots(tuple(slots), pools), method,
                         lambda: getattr(self._kvfuzz_object, method)(free_index),
                         same_args((slots,)))

    @modelled
    def free_segment(self, free_index, *, start_pos):
        return self._segments("free_segment", "both", [(free_index, start_pos)])

    @modelled
    def free_swa_segment(self, free_index, *, start_pos):
        return self._segments("free_swa_segment", "swa", [(free_index, start_pos)])

    @modelled
    def free_full_segment(self, free_index, *, start_pos):
        return self._segments("free_full_segment", "full", [(free_index, start_pos)])

    @modelled
    def free_segments(self, segments):
        return self._segments("free_segments", "both", list(segments))

    @modelled
    def free_full_segments(self, segments):
        return self._segments("free_full_segments", "full", list(segments))

    def _segments(self, method: str, pools: str, segments):
        """The engine's segments (an iterator read once: the allocator gets the same list)."""
        op, expected = _release_op(self, pools, method, segments)
        allocator = self._kvfuzz_object
        if method.endswith("segments"):
            perform = lambda: getattr(allocator, method)(segments)  # noqa: E731
        else:
            index, start = segments[0]
            perform = lambda: getattr(allocator, method)(index, start_pos=start)  # noqa: E731
        return self._run(op, RELEASES[pools, True], perform, expected)

    # -- the mapping, re-paired by the SWA prefix cache ---------------------------------------
    @modelled
    def set_full_to_swa_mapping(self, full_indices, swa_indices):
        full = self._slots(plain_ints(full_indices), "set_full_to_swa_mapping")
        swa = self._slots(plain_ints(swa_indices), "set_full_to_swa_mapping")
        if len(full) != len(swa):
            self._refuse(f"set_full_to_swa_mapping of {len(full)} full and {len(swa)} SWA "
                         f"slots")
        return self._run(SetMapping(tuple(full), tuple(swa)), "set_mapping",
                         lambda: self._kvfuzz_object.set_full_to_swa_mapping(full_indices,
                                                                             swa_indices),
                         same_args((full, swa)))

    @modelled
    def clear_full_to_swa_mapping(self, full_indices):
        full = self._slots(plain_ints(full_indices), "clear_full_to_swa_mapping")
        return self._run(ClearMapping(tuple(full)), "clear_mapping",
                         lambda: self._kvfuzz_object.clear_full_to_swa_mapping(full_indices),
                         same_args((full,)))

    # -- groups and clear ----------------------------------------------------------------------
    @modelled
    def free_group_begin(self):
        return self._run(GroupBegin(), "group_begin", self._kvfuzz_object.free_group_begin)

    @modelled
    def free_group_end(self):
        return self._run(GroupEnd(), "group_end", self._kvfuzz_object.free_group_end)

    @modelled
    def clear(self):
        return self._run(Clear(), "clear", self._kvfuzz_object.clear)

    @modelled
    def resize(self, config):
        header = self.kvfuzz_session.header
        size = self._count(config.full_max_total_num_tokens, "resize", header.size)
        size_swa = self._count(config.swa_max_total_num_tokens, "resize", header.size_swa)
        if min(size, size_swa) < header.page_size:
            self._refuse(f"resize to a pool smaller than a page ({size}, {size_swa})")
        return self._run(Resize(size, size_swa), "resize",
                         lambda: self._kvfuzz_object.resize(config), same_args((size, size_swa)))

    def _slots(self, values: list[int], method: str) -> list[int]:
        return _checked(self, values, method)
