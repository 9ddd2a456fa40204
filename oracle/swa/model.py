"""Reference model of the hybrid full + sliding-window allocator (upstream
`SWATokenToKVPoolAllocator`, sglang 0.5.23; its released source is the contract, summarised in
docs/upstream-sglang.md) in plain lists and dicts.

Two pools, each the paged allocator's model (the token allocator's at page size 1), and the
full-to-SWA mapping: full slot -> SWA slot, absent meaning 0 (no SWA peer). What every call does:
  - alloc(n) (page size 1), alloc_extend: None, changing nothing, unless BOTH pools have room;
    then the same request shape is allocated in each pool (the SWA side continues from the SWA
    peer of `last_loc`) and every new full slot is mapped to its SWA slot;
  - alloc_extend_swa_tail (one request): full slots for the extend, SWA slots (fresh pages, from
    offset 0) and mappings only for its last `tail` tokens;
  - alloc_decode: the same, one token per request; a failed call changes nothing (the contract a
    scheduler relies on; upstream checks neither pool first, see its profile);
  - free_swa(full slots): the SWA peers released and unmapped; above page size 1 whole pages
    (every slot of each touched full page), unmapped slots skipped, one deduplicating free;
  - free_swa_segment(full slots, start_pos): one SWA page per full page (`slots[::P]`);
  - free_full: the full side only; free = free_swa then free_full; *_segment likewise;
  - free groups: SWA releases are resolved (unmapped) at the call and released at the end, page
    ids first, then the set-shaped ones, then the full pool's own group; a nested begin is
    rejected with nothing changed, an end with none open does nothing (before SGLang 0.5.18
    `free_swa` released at once inside a group: `contract.py`);
  - set_full_to_swa_mapping / clear_full_to_swa_mapping (a prefix cache's re-pairing): the
    mapping of those full slots set or cleared, nothing allocated or released;
  - clear(): both pools fresh, mapping empty, group closed; resize(size, size_swa) the same
    at the new sizes;
  - evict_to_free_tokens(tree, n): with a prefix cache that shares prefixes, asks it to evict
    each pool's shortfall below n (`tree.evict_for_alloc(full, swa)`), when there is one;
    reclaim_for_prealloc(tree, full, swa): the SWA shortfall only, then a description of what
    is still missing, or None;
  - the checks a caller's bug meets (each a rejection with nothing changed): `alloc` above page
    size 1, `alloc_extend`, `alloc_decode` and `alloc_extend_swa_tail` at page size 1, a segment from inside a page, a tail allocation of several requests or with a tail
    outside its extend, always; a segment whose pages have no SWA peer
    (already released), with the debug checks (above page size 1) or the strict invariant
    checks; `free_full` of slots that still have a peer, with the strict checks.
"""

from __future__ import annotations

from kvfuzz.oracle.allocator.model import AllocatorModel, Rejected, page_disjoint
from kvfuzz.oracle.swa.contract import CURRENT, Contract
from kvfuzz.strategies.inputs import ceil_pages

__all__ = ["Rejected", "SWAModel"]


class SWAModel:
    def __init__(self, size: int, size_swa: int, page_size: int, need_sort: bool,
                 debug: bool = False, strict: bool = False, contract: Contract = CURRENT):
        """`contract`: what the release's calls promise where it differs (contract.py)."""
        self.P, self.need_sort, self.debug, self.strict = page_size, need_sort, debug, strict
        self.contract = contract
        self.resize(size, size_swa)

    def resize(self, size: int, size_swa: int) -> None:
        token = self.P == 1
        self.size_full, self.size_swa = size, size_swa
        self.full = AllocatorModel(size, self.P, self.need_sort, token=token)
        self.swa = AllocatorModel(size_swa, self.P, self.need_sort, token=token)
        self.clear()

    def clear(self) -> None:
        self.full.clear()
        self.swa.clear()
        self.mapping: dict[int, int] = {}
        self.group_open = False
        self.swa_page_ids_group: list[int] = []
        self.swa_free_group: list[int] = []

    # --- reclaiming through the prefix cache ---------------------------------------------------
    def evict_to_free_tokens(self, tree, num_tokens: int) -> None:
        """`tree`: None, or a cache with `supports_prefix_sharing()` and
        `evict_for_alloc(num_tokens, swa_num_tokens)`, which releases through this model."""
        if tree is None or not tree.supports_prefix_sharing():
            return
        full = max(0, num_tokens - self.full.available_size())
        swa = max(0, num_tokens - self.swa.available_size())
        if full or swa:
            tree.evict_for_alloc(full, swa)

    def reclaim_for_prealloc(self, tree, full_tokens: int, swa_tokens: int) -> str | None:
        available = self.swa.available_size()
        if available < swa_tokens:
            tree.evict_for_alloc(0, swa_tokens - available)
            available = self.swa.available_size()
        if available < swa_tokens:
            return f"SWA eviction insufficient: needed={swa_tokens}, available={available}"
        return None

    # --- sizes --------------------------------------------------------------------------------
    def available_size(self) -> int:
        return min(self.full.available_size(), self.swa.available_size())

    def pages_available(self, num_pages: int) -> bool:
        return all(num_pages <= pool.available_size() // self.P for pool in (self.full, self.swa))

    def translate(self, last_loc: list[int]) -> list[int]:
        # Upstream's mapping ends in a -1 sentinel, so "no prefix" (-1) translates to -1.
        return [-1 if loc == -1 else self.mapping.get(loc, 0) for loc in last_loc]

    # --- allocation ---------------------------------------------------------------------------
    def alloc(self, need_size: int) -> list[int] | None:
        if self.P > 1:
            raise Rejected(f"alloc({need_size}) at page size {self.P}: only page size 1")
        if need_size > self.full.available_size() or need_size > self.swa.available_size():
            return None
        full, swa = self.full.alloc(need_size), self.swa.alloc(need_size)
        return self._map(full, swa)

    def _paged_only(self, method: str) -> None:
        if self.P == 1:
            raise Rejected(f"{method} at page size 1: alloc is the page-size-1 call")

    def alloc_extend(self, prefix_lens, seq_lens, last_loc) -> list[int] | None:
        self._paged_only("alloc_extend")
        pages = sum(ceil_pages(s, self.P) - ceil_pages(q, self.P)
                    for q, s in zip(prefix_lens, seq_lens))
        if not self.pages_available(pages):
            return None
        swa_last = self.translate(last_loc)
        full = self.full.alloc_extend(prefix_lens, seq_lens, last_loc, pages)
        swa = self.swa.alloc_extend(prefix_lens, seq_lens, swa_last, pages)
        return self._map(full, swa)

    def alloc_extend_swa_tail(self, prefix_lens, seq_lens, last_loc, tail: int):
        """One request: full slots for the whole extend, fresh SWA pages for the last `tail`
        tokens only (from SWA offset 0), mapped; None, changing nothing, unless both fit. A
        batch of another size, or a tail outside the extend, is rejected."""
        self._paged_only("alloc_extend_swa_tail")
        if len(seq_lens) != 1 or len(prefix_lens) != 1:
            raise Rejected(f"alloc_extend_swa_tail of {len(seq_lens)} requests: one at a time")
        if not 0 <= tail <= seq_lens[0] - prefix_lens[0]:
            raise Rejected(f"swa_tail_len {tail} outside the extend of "
                           f"{seq_lens[0] - prefix_lens[0]} tokens")
        full_pages = sum(ceil_pages(s, self.P) - ceil_pages(q, self.P)
                         for q, s in zip(prefix_lens, seq_lens))
        swa_pages = ceil_pages(tail, self.P)
        if full_pages > self.full.available_size() // self.P or \
                swa_pages > self.swa.available_size() // self.P:
            return None
        full = self.full.alloc_extend(prefix_lens, seq_lens, last_loc, full_pages)
        if tail:
            swa = self.swa.alloc_extend([0], [tail], [-1], swa_pages)
            for slot in full[:len(full) - tail]:
                self.mapping.pop(slot, None)
            self._map(full[len(full) - tail:], swa)
        return full

    def would_decode(self, seq_lens) -> bool:
        """Whether both pools have the pages a decode of `seq_lens` needs (the scheduler's check)."""
        return self.pages_available(sum((s - 1) % self.P == 0 for s in seq_lens))

    def alloc_decode(self, seq_lens, last_loc) -> list[int] | None:
        self._paged_only("alloc_decode")
        if not self.would_decode(seq_lens):
            return None
        swa_last = self.translate(last_loc)
        full = self.full.alloc_decode(seq_lens, last_loc)
        swa = self.swa.alloc_decode(seq_lens, swa_last)
        return self._map(full, swa)

    def _map(self, full: list[int], swa: list[int]) -> list[int]:
        self.mapping.update((f, s) for f, s in zip(full, swa) if s)
        return full

    def set_mapping(self, full: list[int], swa: list[int]) -> None:
        """`set_full_to_swa_mapping`: the caller re-pairs full slots with SWA slots (0: none)."""
        for f, s in zip(full, swa):
            if s:
                self.mapping[f] = s
            else:
                self.mapping.pop(f, None)

    def clear_mapping(self, full: list[int]) -> None:
        self._unmap(full)

    # --- release ------------------------------------------------------------------------------
    def _whole_pages(self, slots: list[int]) -> list[int]:
        """Every slot of each page `slots` touch, once (the releases this feeds are sets)."""
        pages = sorted({s // self.P for s in slots})
        return [page * self.P + k for page in pages for k in range(self.P)]

    def _unmap(self, slots: list[int]) -> list[int]:
        """The SWA peers of `slots` (0 where none), their mapping cleared."""
        return [self.mapping.pop(slot, 0) for slot in slots]

    def _defers(self, direct: bool) -> bool:
        """Whether an SWA release waits for the group's end: inside a group, unless the class
        had no SWA group of its own and `free_swa` was called directly (contract.py: its `free`
        was deferred whole by the base's group, whose SWA side is modelled as today's)."""
        return self.group_open and (self.contract.swa_group or not direct)

    def free_swa(self, slots: list[int], direct: bool = True) -> None:
        if not slots:
            return
        if self.P > 1:
            peers = self._unmap(self._whole_pages(slots))
        elif self.contract.row_free:
            # before free_full, `free_swa` skipped unmapped slots at page size 1 too (a whole
            # row's `free` passes the window's passed tokens, which have no peer), releasing
            # the peers in the caller's order (contract.py)
            peers = self._unmap(slots)
        else:
            return self.free_swa_segment(slots, 0, direct)
        if self._defers(direct):
            self.swa_free_group += peers
            return
        self._release_swa(peers)

    def _release_swa(self, peers: list[int]) -> None:
        self.swa.free_slots([s for s in peers if s > 0])

    def free_swa_segment(self, slots: list[int], start_pos: int, direct: bool = True) -> None:
        if not slots:
            return
        if start_pos % self.P:
            raise Rejected(f"segment start {start_pos} is not a multiple of {self.P}")
        reps = slots[::self.P]
        peers = [self.mapping.get(rep, 0) for rep in reps]
        if (self.strict or (self.debug and self.P > 1)) and not all(peers):
            unmapped = [rep for rep, peer in zip(reps, peers) if not peer]
            raise Rejected(f"segment pages without an SWA peer (released already), e.g. full "
                           f"slot {unmapped[0]}")
        pages = [peer // self.P for peer in peers]
        self._unmap(self._whole_pages(reps))
        if self._defers(direct):
            self.swa_page_ids_group += pages
            return
        self.swa.free_page_ids(pages)

    def _check_unmapped(self, slots: list[int]) -> None:
        mapped = [slot for slot in slots if self.mapping.get(slot)]
        if self.strict and mapped:
            raise Rejected(f"{len(mapped)} full slots released with an SWA peer still mapped, "
                           f"e.g. {mapped[0]} -> {self.mapping[mapped[0]]}")

    def free_full(self, slots: list[int]) -> None:
        if slots:
            self._check_unmapped(slots)
            self.full.free_slots(slots)

    def free(self, slots: list[int]) -> None:
        if slots:
            self.free_swa(slots, direct=False)
            self.free_full(slots)

    def free_segment(self, slots: list[int], start_pos: int) -> None:
        if slots:
            self.free_swa_segment(slots, start_pos, direct=False)
            self.full.free_segment(slots, start_pos)

    def free_full_segment(self, slots: list[int], start_pos: int) -> None:
        if slots:
            self._check_unmapped(slots)
            self.full.free_segment(slots, start_pos)

    # A by-slot guard's releases of several row segments (upstream's base class: each
    # segment's release in turn, a segment sharing a page with the one before it rejected when
    # it is reached, the ones before it staying released).
    def free_segments(self, segments) -> None:
        self._each_segment(segments, self.free_segment)

    def free_full_segments(self, segments) -> None:
        self._each_segment(segments, self.free_full_segment)

    def free_swa_segments(self, segments) -> None:
        self._each_segment(segments, self.free_swa_segment)

    # Releases on one of the pools itself, reached past the allocator (the mapping untouched).
    def full_pool_free(self, slots: list[int]) -> None:
        self.full.free_slots(slots)

    def full_pool_free_segments(self, segments) -> None:
        self._each_segment(segments, self.full.free_segment)

    def swa_pool_free(self, slots: list[int]) -> None:
        self.swa.free_slots(slots)

    def swa_pool_free_segments(self, segments) -> None:
        self._each_segment(segments, self.swa.free_segment)

    def _each_segment(self, segments, release) -> None:
        for slots, start_pos in page_disjoint(segments, self.P):
            release(slots, start_pos)

    def group_begin(self) -> None:
        if self.group_open:
            raise Rejected("free_group_begin inside an open free group (groups cannot nest)")
        self.group_open = True
        self.swa_page_ids_group, self.swa_free_group = [], []
        self.full.group_begin()

    def group_end(self) -> None:
        self.group_open = False
        ids, self.swa_page_ids_group = self.swa_page_ids_group, []
        peers, self.swa_free_group = self.swa_free_group, []
        if ids:
            self.swa.free_page_ids(ids)
        if peers:
            self._release_swa(peers)
        self.full.group_end()
