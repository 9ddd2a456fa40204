"""Broken variants of the vectorized extend/decode, one per fault the upstream discussion names.

Each reuses the steps of `three_phase.py` and breaks exactly one; `tests/paged/test_mutants.py`
proves the differential suite catches every one with a readable report.
"""

from __future__ import annotations

import torch

from kvfuzz.impl.paged.three_phase import owners_and_offsets, phase_lengths, phase_values


def extend_without_empty_pool_guard(prefix_lens, seq_lens, last_loc, free_pages, out_indices,
                                    page_size, device):
    """Bug 1 of PR #37938: gathers from an empty pool although no request needs a page."""
    num_tokens = out_indices.shape[0]
    if num_tokens == 0:
        return
    owner, local = owners_and_offsets(prefix_lens, seq_lens, num_tokens, device)
    lengths = phase_lengths(prefix_lens, seq_lens, page_size)
    out_indices.copy_(phase_values(owner, local, last_loc, free_pages, lengths, page_size))


def extend_without_clamp(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size,
                         device):
    """Bug 2 of PR #37938: dead-branch pool indices left unclamped (out of range on a tight pool)."""
    num_tokens = out_indices.shape[0]
    if num_tokens == 0 or free_pages.numel() == 0:
        return _fill_current_page(prefix_lens, seq_lens, last_loc, out_indices, device)
    owner, local = owners_and_offsets(prefix_lens, seq_lens, num_tokens, device)
    lengths = phase_lengths(prefix_lens, seq_lens, page_size)
    out_indices.copy_(phase_values(owner, local, last_loc, free_pages, lengths, page_size,
                                   clamp=False))


def extend_owner_left_bisect(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size,
                             device):
    """Owner lookup by left bisect plus a one-step fix-up: right unless a zero-length request
    sits at the boundary, which then steals the next request's slots."""
    num_tokens = out_indices.shape[0]
    if num_tokens == 0 or free_pages.numel() == 0:
        return _fill_current_page(prefix_lens, seq_lens, last_loc, out_indices, device)
    extend_lens = seq_lens - prefix_lens
    end_pos = torch.cumsum(extend_lens, 0)
    start_pos = end_pos - extend_lens
    slot_index = torch.arange(num_tokens, device=device)
    owner = torch.searchsorted(end_pos, slot_index, right=False)
    owner = torch.where(end_pos[owner] == slot_index, owner + 1, owner)
    local = slot_index - start_pos[owner]
    lengths = phase_lengths(prefix_lens, seq_lens, page_size)
    out_indices.copy_(phase_values(owner, local, last_loc, free_pages, lengths, page_size))


def extend_inclusive_page_start(prefix_lens, seq_lens, last_loc, free_pages, out_indices,
                                page_size, device):
    """Each request's pool slice starts at the inclusive prefix sum (its own pages counted)."""
    num_tokens = out_indices.shape[0]
    if num_tokens == 0 or free_pages.numel() == 0:
        return _fill_current_page(prefix_lens, seq_lens, last_loc, out_indices, device)
    owner, local = owners_and_offsets(prefix_lens, seq_lens, num_tokens, device)
    num1, num2, start_pages, end_pages = phase_lengths(prefix_lens, seq_lens, page_size)
    shifted = (num1, num2, end_pages, end_pages + (end_pages - start_pages))
    out_indices.copy_(phase_values(owner, local, last_loc, free_pages, shifted, page_size))


def decode_inclusive_rank(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
    """Decode rank by inclusive cumsum: every page-opening request takes its successor's page."""
    needs = ((seq_lens - 1) % page_size == 0).to(torch.int64)
    if free_pages.numel() == 0:
        out_indices.copy_(last_loc + 1)
        return
    rank = torch.cumsum(needs, 0).clamp_(max=free_pages.numel() - 1)
    out_indices.copy_(torch.where(needs.bool(), free_pages[rank] * page_size, last_loc + 1))


def decode_opens_page_off_by_one(seq_lens, last_loc, free_pages, out_indices, page_size,
                                 num_new_pages):
    """Tests `seq % P == 0` instead of `(seq - 1) % P == 0` for the token that opens a page."""
    needs = (seq_lens % page_size == 0).to(torch.int64)
    if free_pages.numel() == 0:
        out_indices.copy_(last_loc + 1)
        return
    rank = (torch.cumsum(needs, 0) - needs).clamp_(max=free_pages.numel() - 1)
    out_indices.copy_(torch.where(needs.bool(), free_pages[rank] * page_size, last_loc + 1))


def _fill_current_page(prefix_lens, seq_lens, last_loc, out_indices, device):
    # Shared by mutants that keep the empty-pool guard: every slot continues last_loc's page.
    num_tokens = out_indices.shape[0]
    if num_tokens == 0:
        return
    owner, local = owners_and_offsets(prefix_lens, seq_lens, num_tokens, device)
    out_indices.copy_(last_loc[owner] + 1 + local)
