"""What SGLang's `UnifiedRadixCache` promises when its Mamba component lives on the unified memory
pool (sglang 0.5.23, `init_unified_mamba_pools`: full KV pages and Mamba states in one byte
buffer, the allocator a `MambaFullCacheDonor`), as plain-Python facts:

- The full side keeps no free list: its pages are conserved as the tree's cached tokens, which
  are the full side's allocated tokens (`allocated_count()`), no page both cached and free.
- A Mamba allocation short of bytes while a Mamba id is free (`evict_for_alloc(mamba_num=1)`)
  takes Full leaves as the donor: "Full KV can supply bytes but cannot recycle Mamba virtual
  IDs" (`evict_for_alloc`), so a state is evicted for the id shortfall alone, or with the node
  that held it, or when Full cannot fund the state (the Mamba-victim fallback).
- The donor walk stops at the first victim after which the state fits
  (`_evict_components.target_reached`: a recheck after every victim once the Full tokens freed
  reach the lower bound `full_tokens_before_mamba_recheck`, one token for one state): without
  its last victim, what it freed falls short of the state's missing bytes.
- What the call answers is what left the tree: `num_tokens_evicted` the full tokens of the nodes
  gone, `mamba_num_evicted` the states gone with them or from nodes that stay.
- Once the walk is over, a state is allocated unless nothing evictable is left.

Standard library only."""

from __future__ import annotations


def shared_full_problems(cached_pages: set, free_pages: list[int], allocated: int,
                         cached_tokens: int) -> list[str]:
    """The full side of the shared buffer: `cached_pages` the tree's pages, `free_pages` the
    unmapped virtual pages, `allocated` the full side's allocated tokens."""
    problems = []
    both = sorted(cached_pages & set(free_pages))
    if both:
        problems.append(f"{len(both)} pages both in the tree and free, e.g. {both[:6]}")
    if allocated != cached_tokens:
        off = allocated - cached_tokens
        problems.append(f"the full side has {allocated} tokens allocated, the tree caches "
                        f"{cached_tokens}: {abs(off)} {'leaked' if off > 0 else 'lost'}")
    return problems


def victim_bytes(tokens: int, held_state: bool, page_size: int, page_bytes: int,
                 state_bytes: int) -> int:
    """Bytes an evicted node gives back to the shared buffer: its pages, and its state."""
    return tokens // page_size * page_bytes + (state_bytes if held_state else 0)


def overshoot(victims: list[int], need: int) -> int | None:
    """Bytes freed past the first sufficient victim (`victims`: each node's bytes; `need`: the
    bytes the state was missing), or None when the walk stopped in time. Which node went last
    is not seen from outside, so the largest is taken for it: a bound, never a false alarm."""
    if not victims or sum(victims) - max(victims) < need:
        return None
    return sum(victims) - max(victims) - need + 1
