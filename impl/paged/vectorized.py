"""Vectorized paged `alloc_extend` / `alloc_decode` in torch: no loop over requests, no host sync.

Formulation: the output is a sequence of runs of consecutive slots (a request's rest of its
current page, then one run per new page), and slot j of a run starting at output position o
with first value v is `j + (v - o)`. So each run adds `c = v - o` at o and takes it away at its
end; a prefix sum of those marks (over a buffer of ones, which supplies the `j`) gives every
slot. Work per slot is one fill and one cumsum; everything else is per request or per page.
Shortcuts by shape: P == 1 copies the pool's head; a batch of one uses a 12-op per-slot formula.
Every branch tests a shape, a dtype or a Python int (`page_size`, decode's `num_new_pages`),
never tensor data: no host sync (checked by impl.host_sync in tests/test_sync.py).
"""

from __future__ import annotations

import torch


def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    """Write the slots of a batched extend into `out_indices` (length must be sum(seq - prefix))."""
    num_tokens, batch = out_indices.shape[0], prefix_lens.shape[0]
    if num_tokens == 0:
        return
    if page_size == 1:
        # Every token opens its own page, in request order: the output is the pool's head. A pool
        # shorter than the output makes copy_ raise (or broadcast one page: garbage, no crash).
        out_indices.copy_(free_pages[:num_tokens])
        return
    if batch == 1:
        return _extend_one_request(prefix_lens, last_loc, free_pages, out_indices, page_size,
                                   device)
    extend_lens = seq_lens - prefix_lens
    end_pos = torch.cumsum(extend_lens, 0)
    start_pos = end_pos - extend_lens
    # Phase 1 fills the current page: min(tokens left in it, extend length).
    num1 = torch.minimum(torch.remainder(-prefix_lens, page_size), extend_lens)
    new_pages = torch.div(extend_lens - num1 + (page_size - 1), page_size, rounding_mode="floor")
    page_end = torch.cumsum(new_pages, 0)
    page_start = page_end - new_pages
    # Output position of pool entry k, if request i owns it: first_pos[i] + k * P.
    first_pos = start_pos + num1 - page_start * page_size
    # Pool entries that can be in use: N <= T and N <= T // P + batch, both known from shapes.
    num_candidates = min(free_pages.shape[0], num_tokens, num_tokens // page_size + batch)
    owner = _spread(torch.stack((first_pos, end_pos), 1), page_start, page_end, num_candidates)
    page_pos = owner[:, 0] + torch.arange(0, num_candidates * page_size, page_size,
                                          device=device)
    # Entries past the demand got zeros: their stop is clamped up to their start (empty run).
    page_stop = torch.minimum(page_pos + page_size, owner[:, 1]).clamp_(min=page_pos)
    page_mark = free_pages[:num_candidates] * page_size - 1 - page_pos
    first_mark = last_loc - start_pos  # (last_loc + 1 - start) - 1: the ones supply the 1
    marks = torch.cat((first_mark, page_mark))
    positions = torch.cat((start_pos, page_pos, start_pos + num1, page_stop))
    _prefix_sum_of_marks(out_indices, positions, torch.cat((marks, -marks)))


def _extend_one_request(prefix_lens, last_loc, free_pages, out_indices, page_size, device):
    """Batch of one: slot j is token prefix + j, so no owner lookup and no marks; 12 small ops
    (the general path's fixed cost would lose to the loop here)."""
    num_tokens = out_indices.shape[0]
    index = torch.arange(num_tokens, device=device)
    # remainder(q, -P) = -(tokens left in the current page), so `offset` < 0 in phase 1 and is
    # the offset into the request's new pages after it.
    offset = index + torch.remainder(prefix_lens, -page_size)
    current_slot = index + (last_loc + 1)
    if free_pages.shape[0] == 0:
        out_indices.copy_(current_slot)
        return
    pool_index = torch.div(offset, page_size, rounding_mode="floor").clamp_(
        0, free_pages.shape[0] - 1)
    new_slot = torch.add(offset.remainder(page_size), free_pages.index_select(0, pool_index),
                         alpha=page_size)
    if out_indices.dtype == torch.int64 and last_loc.shape == prefix_lens.shape:
        torch.where(offset < 0, current_slot, new_slot, out=out_indices)  # saves a copy
    else:  # copy_ casts, and raises where out= would resize the caller's buffer
        out_indices.copy_(torch.where(offset < 0, current_slot, new_slot))


def _spread(rows, starts, stops, length):
    """Row i of `rows` at every index in [starts[i], stops[i]) of a `length`-row result, zeros
    where no range covers: a prefix sum of +row at the start and -row at the stop."""
    marks = torch.zeros(length + 1, rows.shape[1], dtype=rows.dtype, device=rows.device)
    at = torch.cat((starts, stops)).clamp_(0, length)  # in range whatever the inputs
    return marks.index_add_(0, at, torch.cat((rows, -rows)))[:length].cumsum_(0)


def _prefix_sum_of_marks(out_indices, positions, values):
    """out[j] = j + (sum of values at positions <= j), written in place.

    Marks at position >= T only end a run past the output: they are dropped, and every position
    is clamped so that no index can leave the buffer whatever the inputs were. Where one run
    ends and the next starts the two marks may sum past int64 (page ids near 2**63 / P); the
    sums wrap and wrap back, and each prefix sum is an output slot, which fits.
    """
    num_tokens = out_indices.shape[0]
    values = torch.where(positions < num_tokens, values, 0)
    positions = positions.clamp(0, num_tokens - 1)
    if out_indices.dtype != torch.int64:  # exact sums need int64 whatever the output type
        scratch = torch.ones(num_tokens, dtype=torch.int64, device=out_indices.device)
        out_indices.copy_(scratch.index_add_(0, positions, values).cumsum_(0))
        return
    out_indices.fill_(1).index_add_(0, positions, values).cumsum_(0)


def alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
    """One token per request: a request whose new token opens a page takes the next pool page.

    `num_new_pages` is the caller's host-side count (upstream computes it from CPU copies before
    the call). As a Python int it is free to branch on, and it is only used to pick a shortcut
    for "no request opens a page" and "every request does"; a wrong count gives wrong slots,
    never an out-of-range index. Anything else (e.g. a tensor) is ignored, to avoid a sync.
    """
    batch = out_indices.shape[0]
    if batch == 0:
        return
    if page_size == 1:
        # Every token opens a page (spec §2), whatever the count says (upstream's helper says 0
        # for P == 1): the pool's head. A short pool makes copy_ raise (or broadcast one page).
        out_indices.copy_(free_pages[:batch])
        return
    hint = num_new_pages if isinstance(num_new_pages, int) else -1
    # out= only where the result has the buffer's shape: out= would resize it otherwise.
    direct = (out_indices.dtype == torch.int64
              and seq_lens.shape == last_loc.shape == out_indices.shape)
    if free_pages.shape[0] == 0 or hint == 0:
        if direct:
            torch.add(last_loc, 1, out=out_indices)
        else:
            out_indices.copy_(last_loc + 1)
        return
    if hint == batch:  # every request opens a page: the pool's head, in order
        out_indices.copy_(free_pages[:batch] * page_size)
        return
    opens_page = torch.remainder(seq_lens, page_size) == 1  # (s - 1) % P == 0 for P >= 2
    rank = torch.cumsum(opens_page, 0).sub_(1).clamp_(0, free_pages.shape[0] - 1)
    new_slot = free_pages.index_select(0, rank) * page_size
    if direct:
        torch.where(opens_page, new_slot, last_loc + 1, out=out_indices)  # saves a copy
    else:
        out_indices.copy_(torch.where(opens_page, new_slot, last_loc + 1))
