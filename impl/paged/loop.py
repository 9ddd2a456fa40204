"""The per-request loop that upstream ran before PR #37938: the performance baseline and a
second opinion. Its `if num1:` tests and tensor slice bounds read one value per request on the
host, which is exactly what the sync counter must see.
"""

from __future__ import annotations

import torch


def alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    extend_lens = seq_lens - prefix_lens
    end_pos = torch.cumsum(extend_lens, 0)
    start_pos = end_pos - extend_lens
    new_pages = (seq_lens + page_size - 1) // page_size - (prefix_lens + page_size - 1) // page_size
    end_new_pages = torch.cumsum(new_pages, 0)
    start_new_pages = end_new_pages - new_pages
    in_page = torch.arange(page_size, device=device)
    for i in range(prefix_lens.shape[0]):
        prefix_len, seq_len, start = prefix_lens[i], seq_lens[i], start_pos[i]
        ceil_prefix = (prefix_len + page_size - 1) // page_size * page_size
        num1 = torch.minimum(seq_len, ceil_prefix) - prefix_len
        if num1:
            out_indices[start:start + num1] = last_loc[i] + 1 + torch.arange(num1, device=device)
        if prefix_len + num1 == seq_len:
            continue
        num2 = seq_len // page_size * page_size - ceil_prefix
        if num2:
            # A pool shorter than the demand makes this a shape-mismatch error (spec §1.5).
            pages = free_pages[start_new_pages[i]:start_new_pages[i] + num2 // page_size]
            out_indices[start + num1:start + num1 + num2] = (
                pages[:, None] * page_size + in_page).reshape(-1)
        num3 = seq_len - seq_len // page_size * page_size
        if num3:
            last_page = free_pages[end_new_pages[i] - 1]
            out_indices[start + num1 + num2:end_pos[i]] = (
                last_page * page_size + torch.arange(num3, device=device))


def alloc_decode(seq_lens, last_loc, free_pages, out_indices, page_size, num_new_pages):
    next_page = 0
    for i in range(seq_lens.shape[0]):
        if (seq_lens[i] - 1) % page_size == 0:
            out_indices[i] = free_pages[next_page] * page_size
            next_page += 1
        else:
            out_indices[i] = last_loc[i] + 1
