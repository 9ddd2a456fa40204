"""Seeded benchmark workloads as `Case`s (plain ints): per-request lengths drawn from fixed seeds,
so every run times the same calls. Valid by construction; `oracle.contract.violations` agrees.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.paged.case import Case

BATCH_SIZES = (1, 8, 64, 1024)
PAGE_SIZES = (1, 16, 64, 128)
# Extend-length bands of PR #37938's table (spec §6.3): decode-like, middle, prefill-like.
BANDS = {"1-8": (1, 8), "32-64": (32, 64), "256-512": (256, 512)}
MAX_PREFIX = 1024
POOL_SLACK = 64  # free pages beyond the demand: the pool is rarely exactly tight in serving


def _last_loc(prefix: int, held_page: int, page_size: int) -> int:
    # Slot of token prefix-1 in the request's current page; -1 for an empty prefix (spec §0).
    return -1 if prefix == 0 else held_page * page_size + (prefix - 1) % page_size


def _pool(rng: random.Random, first_id: int, demand: int) -> tuple[int, ...]:
    size = demand + POOL_SLACK
    return tuple(rng.sample(range(first_id, first_id + 2 * size), size))


def extend_case(batch_size: int, page_size: int, band: str) -> Case:
    """Request i holds page i+1 (its current page); pool ids come after every held page."""
    rng = random.Random(f"bench/extend/{batch_size}/{page_size}/{band}")
    low, high = BANDS[band]
    prefixes = [rng.randint(0, MAX_PREFIX) for _ in range(batch_size)]
    seqs = [q + rng.randint(low, high) for q in prefixes]
    demand = sum(-(-s // page_size) - -(-q // page_size) for q, s in zip(prefixes, seqs))
    return Case("extend", page_size, tuple(seqs),
                tuple(_last_loc(q, rid + 1, page_size) for rid, q in enumerate(prefixes)),
                _pool(rng, batch_size + 1, demand), prefix_lens=tuple(prefixes))


def decode_case(batch_size: int, page_size: int) -> Case:
    rng = random.Random(f"bench/decode/{batch_size}/{page_size}")
    seqs = [rng.randint(1, MAX_PREFIX + 1) for _ in range(batch_size)]
    demand = sum((s - 1) % page_size == 0 for s in seqs)
    return Case("decode", page_size, tuple(seqs),
                tuple(_last_loc(s - 1, rid + 1, page_size) for rid, s in enumerate(seqs)),
                _pool(rng, batch_size + 1, demand))
