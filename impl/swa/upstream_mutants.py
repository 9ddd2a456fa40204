"""Broken variants of the released upstream `SWATokenToKVPoolAllocator` (sglang 0.5.23): the
installed module's source with ONE edit inside one method each (`impl/source_mutation.py`), built
on first use. They need sglang (and the packages of impl/upstream.lock) installed."""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation, mutant_classes

MODULE, CLASS = "sglang.srt.mem_cache.allocator.swa", "SWATokenToKVPoolAllocator"

MUTATIONS = {
    "extend_untranslated": Mutation(
        f"{CLASS}.alloc_extend", "            swa_last_loc,\n", "            last_loc,\n",
        "alloc_extend continues the SWA side from the full last_loc, not its SWA peer"),
    "release_keeps_padding": Mutation(
        f"{CLASS}._release_swa", "swa_indices = swa_indices[swa_indices > 0]",
        "swa_indices = swa_indices",
        "set-shaped SWA frees keep the unmapped (0) entries: padding page 0 goes on the free list"),
    "clear_keeps_mapping": Mutation(
        f"{CLASS}.clear", "self.full_to_swa_index_mapping[:-1].fill_(0)", "pass",
        "clear() keeps the full-to-SWA mapping"),
    "group_skips_full_side": Mutation(
        f"{CLASS}.free_group_begin", "self.full_attn_allocator.free_group_begin()", "pass",
        "a free group defers only the SWA side: full slots are released at once"),
    "tail_mapped_from_the_start": Mutation(
        f"{CLASS}.alloc_extend_swa_tail", "alloc_full_indices[-swa_tail_len:], alloc_swa_indices",
        "alloc_full_indices[:swa_tail_len], alloc_swa_indices",
        "alloc_extend_swa_tail maps the extend's first tokens, not its tail, to the SWA slots"),
    "segment_unmaps_representatives": Mutation(
        f"{CLASS}._free_swa_pages_none_cuda",
        "mapping_indices = self._expand_to_full_pages(full_page_representatives)",
        "mapping_indices = full_page_representatives",
        "free_swa_segment clears the mapping of each page's first slot only"),
}


__getattr__ = mutant_classes(MODULE, CLASS, MUTATIONS, "sglang_swa")
