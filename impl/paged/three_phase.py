"""The upstream vectorized formulation (PR #37938, as released in sglang 0.5.23; spec §6.5),
rewritten here: searchsorted owner lookup, three phases per request, torch.where per slot.

Kept as a registered implementation so benchmarks compare it with `paged_torch` in one run, and
split into steps so the mutants in `mutants.py` can each break exactly one of them.
"""

from __future__ import annotations

import torch


def owners_and_offsets(prefix_lens, seq_lens, num_tokens, device, right=True):
    """Owner request and offset inside that request's span, for every output slot.

    `right=True` matters: a right bisect over the running end positions skips requests with a
    zero-length extend, whose end equals the previous request's end.
    """
    extend_lens = seq_lens - prefix_lens
    end_pos = torch.cumsum(extend_lens, 0)
    start_pos = end_pos - extend_lens
    slot_index = torch.arange(num_tokens, device=device, dtype=torch.int64)
    owner = torch.searchsorted(end_pos, slot_index, right=right)
    return owner, slot_index - start_pos[owner]


def phase_lengths(prefix_lens, seq_lens, page_size):
    """Per request: tokens in each phase, and its slice [start, end) of the pool."""
    ceil_prefix = (prefix_lens + page_size - 1) // page_size * page_size
    floor_seq = seq_lens // page_size * page_size
    num1 = torch.minimum(seq_lens, ceil_prefix) - prefix_lens
    done = prefix_lens + num1 == seq_lens
    zeros = torch.zeros_like(num1)
    num2 = torch.where(done, zeros, floor_seq - ceil_prefix)
    num3 = torch.where(done, zeros, seq_lens - floor_seq)
    pages = num2 // page_size + (num3 > 0).to(torch.int64)
    end_pages = torch.cumsum(pages, 0)
    return num1, num2, end_pages - pages, end_pages


def phase_values(owner, local, last_loc, free_pages, lengths, page_size, clamp=True):
    num1, num2, start_pages, end_pages = (x[owner] for x in lengths)
    in_phase1 = local < num1
    in_phase2 = ~in_phase1 & (local < num1 + num2)
    rel2 = (local - num1).clamp(min=0)
    rel3 = (local - num1 - num2).clamp(min=0)
    index2 = start_pages + rel2 // page_size
    index3 = end_pages - 1
    if clamp:
        # torch.where evaluates every branch for every slot: dead lanes must index in range.
        index2 = index2.clamp(0, free_pages.numel() - 1)
        index3 = index3.clamp(0, free_pages.numel() - 1)
    value1 = last_loc[owner] + 1 + local
    value2 = free_pages[index2] * page_size + rel2 % page_size
    value3 = free_pages[index3] * page_size + rel3
    return torch.where(in_phase1, value1, torch.where(in_phase2, value2, value3))


def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    num_tokens = out_indices.shape[0]
    if num_tokens == 0:
        return
    owner, local = owners_and_offsets(prefix_lens, seq_lens, num_tokens, device)
    if free_pages.numel() == 0:
        # Upstream also asserts here that no request needs a page; that assert reads a tensor on
        # the host, so it is left to the harness's contract check.
        out_indices.copy_(last_loc[owner] + 1 + local)
        return
    lengths = phase_lengths(prefix_lens, seq_lens, page_size)
    out_indices.copy_(phase_values(owner, local, last_loc, free_pages, lengths, page_size))


def alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
    """Upstream `alloc_decode_naive`: trusts the caller's `num_new_pages` (a host int)."""
    if num_new_pages == 0:
        out_indices.copy_(last_loc + 1)
        return
    needs = ((seq_lens - 1) % page_size == 0).to(torch.int64)
    rank = (torch.cumsum(needs, 0) - needs).clamp_(max=num_new_pages - 1)
    new_slot = free_pages[rank] * page_size
    out_indices.copy_(torch.where(needs.bool(), new_slot, last_loc + 1))
