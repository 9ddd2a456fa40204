"""Vectorized paged `alloc_extend` / `alloc_decode` in torch: no loop over requests, no host sync.

Formulation: each output slot j belongs to request `owner[j]` at token position `position[j]`.
A position below the request's first page boundary continues the page of `last_loc`; any other
position lands in the request's k-th new page, k = (position - ceil_prefix) // P, whose id is
`free_pages[page_start + k]`. That folds the spec's phases 2 and 3 into one gather.
"""

from __future__ import annotations

import torch


def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    """Write the slots of a batched extend into `out_indices` (length must be sum(seq - prefix)).

    Reads no tensor value on the host: every branch below tests a shape, never data.
    """
    num_tokens = out_indices.shape[0]
    if num_tokens == 0:
        return
    extend_lens = seq_lens - prefix_lens
    ceil_prefix = (prefix_lens + page_size - 1) // page_size * page_size
    new_pages = (seq_lens + page_size - 1) // page_size - ceil_prefix // page_size
    page_start = torch.cumsum(new_pages, 0) - new_pages
    start_pos = torch.cumsum(extend_lens, 0) - extend_lens
    # One row of per-request offsets, gathered once per slot (one index_select, not four).
    per_request = torch.stack((
        prefix_lens - start_pos,                 # slot index -> token position
        ceil_prefix,                             # first position that needs a new page
        last_loc + 1 - prefix_lens,              # position -> slot, inside last_loc's page
        page_start * page_size - ceil_prefix,    # position -> pool index * P
    ), dim=1)
    # Owner of each slot: right bisect over running ends skips zero-length requests. Not
    # repeat_interleave(..., output_size=): in torch 2.13 on CPU it corrupts the heap when a
    # repeat is negative (seq < prefix), and this function must fail safely outside its contract.
    slot_index = torch.arange(num_tokens, device=device)
    owners = torch.searchsorted(torch.cumsum(extend_lens, 0), slot_index, right=True)
    rows = per_request.index_select(0, owners)
    position = slot_index + rows[:, 0]
    in_current_page = position < rows[:, 1]
    current_slot = position + rows[:, 2]
    if free_pages.numel() == 0:
        # Legal only when no request needs a page; gathering from an empty pool would raise.
        out_indices.copy_(current_slot)
        return
    # Lanes in the current page compute a negative pool index that torch.where never selects;
    # clamp it (and any index past a short pool) so the gather itself stays in range.
    pool_index = torch.div(position + rows[:, 3], page_size, rounding_mode="floor")
    pool_index.clamp_(0, free_pages.numel() - 1)
    new_slot = free_pages.index_select(0, pool_index) * page_size + position % page_size
    out_indices.copy_(torch.where(in_current_page, current_slot, new_slot))


def alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
    """One token per request: a request whose new token opens a page takes the next pool page.

    `num_new_pages` is accepted for the upstream signature; the pool's length (a shape) is
    enough to keep the gather in range, so the value is never read.
    """
    if out_indices.shape[0] == 0:
        return
    next_slot = last_loc + 1
    if free_pages.numel() == 0:
        out_indices.copy_(next_slot)
        return
    opens_page = (seq_lens - 1) % page_size == 0
    needs = opens_page.to(torch.int64)
    rank = (torch.cumsum(needs, 0) - needs).clamp_(max=free_pages.numel() - 1)
    new_slot = free_pages.index_select(0, rank) * page_size
    out_indices.copy_(torch.where(opens_page, new_slot, next_slot))
