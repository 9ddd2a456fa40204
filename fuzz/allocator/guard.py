"""`kvfuzz.guard` and `kvfuzz.record` of a live SGLang token-to-KV-pool allocator (the paged
class or, at page size 1, the token class): the object an engine's scheduler, prefix cache and
model runner call, wrapped so that each call becomes an op of an `allocator` trace
(`strategies/allocator/trace.py`) as it happens and, guarding, is checked in lock step with the
oracle (`fuzz/engine/guard.py`): the slots handed out (exactly, and that a page opened is held
by no one and a page continued is the request's last one), the free list in order, the staged
pages, `available_size`, and the invariants (every page free, staged, pending in a free group
or held by the engine, once).

The engine's calls carry lengths and slots, not requests, so they map onto the trace's by-slot
ops: `alloc(n)`: `alloc_slots`; `alloc_extend(...)`: `extend_slots`; `alloc_decode(...)`:
`decode_slots`; `free` / `free_full`: `free_slots`; `free_segment` / `free_segments` (and their
`free_full_` forms, the same on one pool): `free_segments`; `free_page_ids`: `free_pages`;
`free_group_begin` / `free_group_end` / `clear`: `group_begin` / `group_end` / `clear`. Every
page handed out is held by "the engine" until a release names it. Reads go through
(`available_size` and the capacity queries; those that evict, `evict_to_free_tokens` and
`check_decode_capacity`, free through the prefix cache, which calls this wrapper). Refused
(`GuardUnsupported`, before the call): any other method that changes the allocator
(`merge_and_sort_free`, `resize`), an allocator larger than the format holds (2^20 slots,
2^14 pages) or used before it was guarded, and a batch whose `extend_num_tokens` is not its
lengths' sum.
"""

from __future__ import annotations

import inspect

from kvfuzz.fuzz.engine.guard import (GuardedObject, GuardUnsupported, Session,
                                      live_implementation, modelled, open_session, plain_ints,
                                      same_args)
from kvfuzz.strategies.allocator.codec import MAX_BATCH, MAX_PAGES, MAX_SIZE
from kvfuzz.strategies.allocator.profile import TOKEN_INTERFACE
from kvfuzz.strategies.allocator.trace import (AllocSlots, Clear, DecodeSlots, ExtendSlots,
                                               FreePages, FreeSegments, FreeSlots, GroupBegin,
                                               GroupEnd, Misuse, Trace)

READS = frozenset({
    "available_size", "get_kvcache", "get_all_free_pages", "debug_print",
    "verify_byte_accounting", "mamba_full_cache_donor", "request_slot_reserve",
    "max_new_tokens_for_memory", "prealloc_fits_assumes_reclaim", "prealloc_ceiling_fits",
    "prealloc_fits", "get_extend_allocation_demand", "translate_kv_indices_for_transfer",
    "create_prefill_budget", "evict_to_free_tokens", "check_decode_capacity",
    "get_cpu_copy", "load_cpu_copy", "set_hicache_transfer_done_event"})
# Where SGLang builds its allocator (`kvfuzz guard allocator -- COMMAND`: fuzz/engine/autoguard/).
SITES = ("sglang.srt.mem_cache.kv_cache_configurator:PagedTokenToKVPoolAllocator",
         "sglang.srt.mem_cache.kv_cache_configurator:TokenToKVPoolAllocator")


def header(allocator, impl) -> Trace:
    """The trace's settings, read from the live allocator, which must be as new."""
    def refuse(why: str):
        raise GuardUnsupported(f"kvfuzz.guard(allocator): {why}")

    page_size, size = int(allocator.page_size), int(allocator.size)
    if not 1 <= page_size <= size <= MAX_SIZE or size // page_size > MAX_PAGES:
        refuse(f"an allocator of {size} slots in pages of {page_size}: the trace holds at most "
               f"{MAX_SIZE} slots and {MAX_PAGES} pages")
    token = TOKEN_INTERFACE in impl.preconditions or \
        (page_size == 1 and getattr(allocator, "num_pages", None) is None)
    from kvfuzz.impl.driver_calls import free_list_of, staged_of

    # Used: fewer pages free, some staged, a group open. A new one whose free list is wrong
    # (page 0 on it, say) is not refused: the session reports its state as the constructor's.
    if len(free_list_of(allocator)) < size // page_size or staged_of(allocator) or \
            getattr(allocator, "free_group", None) is not None:
        refuse("the allocator has been used: guard it before its first call (the oracle starts "
               "from a full free list)")
    return Trace(page_size, size, bool(allocator.need_sort), (),
                 bool(getattr(allocator, "debug_mode", False)), "token" if token else "paged")


def guard(allocator, *, check: bool = True, impl=None, corpus="corpus",
          on_unsupported: str = "raise"):
    """The live `allocator`, wrapped: checked in lock step with the oracle (`check`), or only
    recorded. `impl` names it in reports (default: its class's catalogue entry). A call the
    trace cannot model raises `GuardUnsupported` (`on_unsupported="raise"`), or, with "stop",
    is said once on stderr and goes through, and so does every call after it, unchecked."""
    from kvfuzz.fuzz.targets import TARGETS

    impl = live_implementation(TARGETS["allocator"], allocator, impl)  # its declarations
    trace = header(allocator, impl)
    driver = None
    if check:
        from kvfuzz.impl.allocator.live import LiveAllocatorDriver

        driver = LiveAllocatorDriver(allocator)
    session = open_session("allocator", allocator, trace, driver, impl, corpus, on_unsupported)
    return GuardedAllocator(allocator, session, driver)


class GuardedAllocator(GuardedObject):
    """Stands for the allocator: the engine's calls go through `kvfuzz_session`."""

    TARGET, READS = "allocator", READS

    def __init__(self, allocator, session: Session, driver):
        super().__init__(allocator, session, driver)
        vars(self)["_kvfuzz_group_open"] = False  # a free group open (as the calls so far leave it)
        # the installed version's parameters (0.5.23 passes host copies of the lengths too)
        for name in ("alloc_extend", "alloc_decode"):
            method = getattr(allocator, name, None)
            vars(self)[f"_kvfuzz_{name[6:]}_signature"] = \
                None if method is None else inspect.signature(method)

    # -- allocations ---------------------------------------------------------------------
    @modelled
    def alloc(self, need_size):
        allocator = self._kvfuzz_object
        n = self._count(need_size, "alloc", MAX_SIZE)
        return self._run(AllocSlots(n), "alloc", lambda: allocator.alloc(need_size),
                         same_args((n,)))

    @modelled
    def alloc_extend(self, *args, **kwargs):
        allocator = self._kvfuzz_object
        given = self._kvfuzz_extend_signature.bind(*args, **kwargs)
        given.apply_defaults()
        values = given.arguments
        prefix = plain_ints(values.get("prefix_lens_cpu", values["prefix_lens"]))
        seq = plain_ints(values.get("seq_lens_cpu", values["seq_lens"]))
        last = plain_ints(values["last_loc"])
        exact = values.get("num_new_pages")
        tokens = values.get("extend_num_tokens")
        if tokens is not None and int(tokens) != sum(s - q for q, s in zip(prefix, seq)):
            self._refuse(f"alloc_extend with extend_num_tokens {int(tokens)}, its lengths sum "
                         f"to {sum(s - q for q, s in zip(prefix, seq))}")
        self._batch(prefix, seq, last)
        exact = None if exact is None else int(exact)
        op = ExtendSlots(tuple(prefix), tuple(seq), tuple(last), exact)
        return self._run(op, "alloc_extend", lambda: allocator.alloc_extend(*args, **kwargs),
                         same_args((prefix, seq, last, exact)))

    @modelled
    def alloc_decode(self, *args, **kwargs):
        allocator = self._kvfuzz_object
        given = self._kvfuzz_decode_signature.bind(*args, **kwargs)
        values = given.arguments
        seq = plain_ints(values.get("seq_lens_cpu", values["seq_lens"]))
        last = plain_ints(values["last_loc"])
        self._batch(seq, seq, last)
        return self._run(DecodeSlots(tuple(seq), tuple(last)), "alloc_decode",
                         lambda: allocator.alloc_decode(*args, **kwargs), same_args((seq, last)))

    # -- releases ------------------------------------------------------------------------
    @modelled
    def free(self, free_index):
        return self._free("free", free_index)

    @modelled
    def free_full(self, free_index):
        return self._free("free_full", free_index)

    def _free(self, method: str, free_index):
        allocator = self._kvfuzz_object
        slots = self._slots(plain_ints(free_index), method)
        return self._run(FreeSlots(tuple(slots)), "free_slots",
                         lambda: getattr(allocator, method)(free_index), same_args((slots,)))

    @modelled
    def free_segment(self, free_index, *, start_pos):
        return self._segments("free_segment", [(free_index, start_pos)],
                              lambda: self._kvfuzz_object.free_segment(free_index,
                                                                       start_pos=start_pos))

    @modelled
    def free_full_segment(self, free_index, *, start_pos):
        return self._segments("free_full_segment", [(free_index, start_pos)],
                              lambda: self._kvfuzz_object.free_full_segment(
                                  free_index, start_pos=start_pos))

    @modelled
    def free_segments(self, segments):
        segments = list(segments)  # an iterator is read once: the allocator gets the same list
        return self._segments("free_segments", segments,
                              lambda: self._kvfuzz_object.free_segments(segments))

    @modelled
    def free_full_segments(self, segments):
        segments = list(segments)
        return self._segments("free_full_segments", segments,
                              lambda: self._kvfuzz_object.free_full_segments(segments))

    def _segments(self, method: str, segments, perform):
        plain = [(self._slots(plain_ints(index), method), int(start)) for index, start in segments]
        if len(plain) > MAX_PAGES or any(not 0 <= start <= MAX_SIZE for _, start in plain):
            self._refuse(f"{method} of {len(plain)} segments outside the trace's limits")
        op = FreeSegments(tuple(s for slots, _ in plain for s in slots),
                          tuple(start for _, start in plain),
                          tuple(len(slots) for slots, _ in plain))
        return self._run(op, "free_segments", perform, same_args((plain,)))

    @modelled
    def free_page_ids(self, page_ids):
        allocator = self._kvfuzz_object
        pages = self._slots(plain_ints(page_ids), "free_page_ids")
        return self._run(FreePages(tuple(pages)), "free_page_ids",
                         lambda: allocator.free_page_ids(page_ids), same_args((pages,)))

    # A begin inside an open group and an end with none open are the trace's misuse ops of
    # those names (upstream asserts on the first, does nothing on the second).
    @modelled
    def free_group_begin(self):
        op = Misuse("group_begin_nested") if self._kvfuzz_group_open else GroupBegin()
        result = self._plain(op, "group_begin", "free_group_begin")
        vars(self)["_kvfuzz_group_open"] = True
        return result

    @modelled
    def free_group_end(self):
        op = GroupEnd() if self._kvfuzz_group_open else Misuse("group_end_unopened")
        vars(self)["_kvfuzz_group_open"] = False
        return self._plain(op, "group_end", "free_group_end")

    @modelled
    def clear(self):
        vars(self)["_kvfuzz_group_open"] = False
        return self._plain(Clear(), "clear", "clear")

    def _plain(self, op, method: str, name: str):
        allocator = self._kvfuzz_object
        return self._run(op, method, getattr(allocator, name))

    # -- mapping -----------------------------------------------------------------------------
    def _batch(self, prefix, seq, last) -> None:
        if not 1 <= len(seq) <= MAX_BATCH or not len(prefix) == len(seq) == len(last) or \
                any(not 0 <= q <= s <= MAX_SIZE for q, s in zip(prefix, seq)) or \
                any(not -1 <= x <= MAX_SIZE for x in last):
            self._refuse(f"a batch of {len(seq)} requests outside the trace's limits (or with a "
                         f"seq_len below its prefix_len)")

    def _slots(self, values: list[int], method: str) -> list[int]:
        if len(values) > MAX_SIZE or any(not 0 <= v <= MAX_SIZE for v in values):
            self._refuse(f"{method} of {len(values)} values outside 0..{MAX_SIZE}")
        return values
