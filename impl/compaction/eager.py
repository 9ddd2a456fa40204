"""Eager free (spec §3.4): unbind, then compact at once so the span never holds a hole.

It may synchronise with the host (the double-free check does): eager mode is the comparison
baseline, not the sync-free path.
"""

from __future__ import annotations

import torch

from kvfuzz.impl.compaction.pool import LazyPool


def eager_free(pool: LazyPool, vids: torch.Tensor) -> None:
    """Free `vids`, then move the live pages of the vacated band into the freed pages below it."""
    # Sorted, as upstream's unique() appends them to the free list; ids are unique by contract.
    vids = torch.sort(vids).values
    pages = pool.v2p[vids]
    if bool((pages < 0).any()):
        raise ValueError(f"{pool.name}: double free of vids {vids.tolist()}")
    pool.v2p[vids] = -1
    pool.free_vids = torch.cat((pool.free_vids, vids))
    count = vids.numel()
    pool.live -= count
    if pool.up:
        new_wm = pool.wm - count
        band = torch.arange(new_wm, pool.wm, dtype=torch.int64, device=pool.device)
        dsts = torch.sort(pages[pages < new_wm]).values
    else:
        new_wm = pool.wm + count
        band = torch.arange(pool.wm + 1, new_wm + 1, dtype=torch.int64, device=pool.device)
        dsts = torch.sort(pages[pages > new_wm]).values
    srcs = band[~torch.isin(band, pages)]
    if srcs.numel() != dsts.numel():
        raise AssertionError(f"{pool.name}: eager band holds {srcs.numel()} live pages but "
                             f"{dsts.numel()} freed pages lie outside it")
    moved = pool.p2v[srcs]
    pool.kv.index_copy_(0, dsts, pool.kv.index_select(0, srcs))
    pool.v2p[moved] = dsts
    pool.p2v[dsts] = moved
    pool.p2v[band] = -1  # freed pages in the band were never tombstoned in p2v
    pool.wm = new_wm
    pool.num_moves += srcs.numel()
