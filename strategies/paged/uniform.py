"""The detection benchmark's baseline for paged cases: plain uniform-random lengths, page sizes and
pools of the seeded sizes with none of their aim (no edge classes, no pool filled to the brim,
no "one page short"), valid by construction, so that every input is compared; what the seeded
generator's aim is measured against (`kvfuzz bench detection`, strategy `uniform`)."""

from __future__ import annotations

import random

from kvfuzz.strategies.inputs import ceil_pages
from kvfuzz.strategies.paged.case import Case

TOKEN_BUDGET = 6144  # as the seeded builders


def uniform_case(target: str, rng: random.Random) -> Case:
    page_size, batch = rng.randint(1, 1024), rng.randint(1, 128)
    prefixes, seqs, budget = [], [], TOKEN_BUDGET
    for _ in range(batch):
        if target == "extend":
            prefix = rng.randint(0, 4 * page_size)
            seq = prefix + min(budget, rng.randint(0, 24 * page_size))
            budget -= seq - prefix
        else:
            seq = rng.randint(1, 7 * page_size)
            prefix = seq - 1
        prefixes.append(prefix)
        seqs.append(seq)
    demand = sum(ceil_pages(s, page_size) - ceil_pages(q, page_size)
                 for q, s in zip(prefixes, seqs))
    ids = rng.sample(range(1, 2**20), batch + demand + rng.randint(0, 8))
    last_loc = tuple(ids[i] * page_size + (q - 1) % page_size if q else -1
                     for i, q in enumerate(prefixes))
    return Case(target, page_size, tuple(seqs), last_loc, tuple(ids[batch:]),
                prefix_lens=tuple(prefixes) if target == "extend" else ())
