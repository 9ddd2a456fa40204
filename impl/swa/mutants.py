"""Broken variants of `swa_allocator.SWAAllocator`, one fault each; the SWA tests prove the lock
step catches every one with a readable report."""

from __future__ import annotations

from kvfuzz.impl.swa.swa_allocator import SWAAllocator


class DecodeUnchecked(SWAAllocator):
    """`alloc_decode` runs both pools without checking either first, and returns None when one
    ran short: the other pool's new page is gone."""

    def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):
        assert self.page_size > 1, "alloc_decode is a paged call"  # its one fault is below
        swa_last = self._translate(last_loc)
        full = self.full_attn_allocator.alloc_decode(seq_lens, seq_lens_cpu, last_loc)
        swa = self.swa_attn_allocator.alloc_decode(seq_lens, seq_lens_cpu, swa_last)
        return None if full is None or swa is None else self._map(full, swa)


class EvictKeepsMapping(SWAAllocator):
    """`free_swa` releases the SWA slots but leaves the full slots mapped to them."""

    def _take_peers(self, slots):
        return self.full_to_swa_index_mapping[slots]


class SWAContinuesFromFullSlot(SWAAllocator):
    """`alloc_extend` continues the SWA side from the full `last_loc`, not its SWA peer."""

    def _translate(self, last_loc):
        return last_loc.clone()


class SegmentUnmapsFirstSlotOnly(SWAAllocator):
    """`free_swa_segment` clears the mapping of each page's first slot only."""

    def _whole_pages(self, slots):
        return slots


class GroupReleasesSWAAtOnce(SWAAllocator):
    """Inside a free group, window evictions release their SWA slots at once."""

    def free_swa(self, free_index):
        group, self.group_open = self.group_open, False
        try:
            super().free_swa(free_index)
        finally:
            self.group_open = group


class ClearKeepsMapping(SWAAllocator):
    """`clear()` frees both pools but keeps the mapping."""

    def clear(self):
        mapping = getattr(self, "full_to_swa_index_mapping", None)
        kept = None if mapping is None else mapping.clone()
        super().clear()
        if kept is not None:
            self.full_to_swa_index_mapping.copy_(kept)


class TailMappedFromTheStart(SWAAllocator):
    """`alloc_extend_swa_tail` maps the extend's first tokens to the tail's SWA slots."""

    def alloc_extend_swa_tail(self, prefix_lens, prefix_lens_cpu, seq_lens, seq_lens_cpu,
                              last_loc, extend_num_tokens, swa_tail_len):
        full = super().alloc_extend_swa_tail(prefix_lens, prefix_lens_cpu, seq_lens,
                                             seq_lens_cpu, last_loc, extend_num_tokens,
                                             swa_tail_len)
        if full is not None and 0 < swa_tail_len < len(full):
            mapping = self.full_to_swa_index_mapping
            peers = mapping[full[-swa_tail_len:]].clone()
            mapping[full] = 0
            mapping[full[:swa_tail_len]] = peers
        return full
