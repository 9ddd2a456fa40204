"""Broken variants of the Triton kernels: each is the source of `triton_kernels.py` with ONE
edit inside one kernel (`impl/source_mutation.py`), imported on first use.

Not here: a masked load without `other=`. The interpreter fills masked lanes with 0 whatever
`other` is (triton 3.7.1 `interpreter.py`, `create_masked_load`), so that fault is invisible on
CPU; `garbage_lanes` injects what a GPU may read there instead.
"""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation, mutant_module

KERNELS = "kvfuzz.impl.paged.triton_kernels"
MUTATIONS = {
    "inclusive_prefix": Mutation(
        "extend_kernel", "earlier = lane < pid", "earlier = lane <= pid",
        "prefix sums include the request itself (inclusive, not exclusive)"),
    "garbage_lanes": Mutation(
        "extend_kernel", "seq_k = tl.load(seq_ptr + lane, mask=earlier, other=0)",
        "seq_k = tl.load(seq_ptr + lane, mask=earlier, other=1)",
        "masked prefix-sum lanes read 1, not 0 (a load without other= on a GPU)"),
    "phase2_at_start": Mutation(
        "extend_kernel", "pos2 = out_start + num1 + offset", "pos2 = out_start + offset",
        "whole-page phase starts writing at the request's first slot, over phase 1"),
    "last_page_plus_one": Mutation(
        "extend_kernel", "index3 = page_start + num2 // page_size",
        "index3 = page_start + num2 // page_size + 1",
        "last partial page taken one pool entry past the request's slice"),
    "inclusive_rank": Mutation(
        "decode_kernel", "before = lane < pid", "before = lane <= pid",
        "page rank counts the request itself"),
    "counts_masked": Mutation(
        "decode_kernel", "openers += (before & ((seq_k - 1) % page_size == 0))",
        "openers += (((seq_k - 1) % page_size == 0))",
        "masked lanes (seq 0) counted as page openers: wrong only when page_size is 1"),
}


def _module(name: str):
    return mutant_module(KERNELS, MUTATIONS[name], f"paged_triton_{name}")


def _extend(name: str):
    def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
        _module(name).alloc_extend(prefix_lens, seq_lens, last_loc, free_pages,
                                         out_indices, page_size, device)
    alloc_extend.__doc__ = MUTATIONS[name].why
    return alloc_extend


def _decode(name: str):
    def alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
        _module(name).alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size,
                                         num_new_pages)
    alloc_decode.__doc__ = MUTATIONS[name].why
    return alloc_decode


extend_inclusive_prefix = _extend("inclusive_prefix")
extend_garbage_lanes = _extend("garbage_lanes")
extend_phase2_at_start = _extend("phase2_at_start")
extend_last_page_plus_one = _extend("last_page_plus_one")
decode_inclusive_rank = _decode("inclusive_rank")
decode_counts_masked = _decode("counts_masked")
