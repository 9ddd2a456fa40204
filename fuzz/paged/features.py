"""The features of paged cases that guide atheris (see `kvfuzz.fuzz.campaign.features`): edge
classes, the phases each request takes, pool fill, sizes in powers of two, and outcomes."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.engine.target import Outcome
from kvfuzz.oracle.paged.contract import (BAD_PAGE_ID, DUPLICATE_PAGES, LAST_LOC, OUT_LEN,
                                          POOL_SHORT, SEQ_BELOW_PREFIX, pages_needed)
from kvfuzz.oracle.paged.model import CURRENT_PAGE, LAST_PARTIAL_PAGE, WHOLE_PAGES, ceil_pages
from kvfuzz.strategies.paged.case import Case
from kvfuzz.strategies.paged.edges import CLASSES, edge_classes

PHASES = (CURRENT_PAGE, WHOLE_PAGES, LAST_PARTIAL_PAGE)
FILL = ("pool empty", "fill 0", "fill <25%", "fill <50%", "fill <75%", "fill <100%", "fill 100%")
KINDS = ("raised", "wrong slot", "not written", "mutated input")
OUTSIDE = (SEQ_BELOW_PREFIX, LAST_LOC, OUT_LEN, POOL_SHORT, BAD_PAGE_ID, DUPLICATE_PAGES)


def feature_names(target: str) -> list[str]:
    names = {f"edge:{name}" for name in CLASSES[target]}
    names |= {f"phase:{phase}" for phase in PHASES}
    names |= {f"phases:{mask}" for mask in range(8)}
    names |= {f"fill:{bucket}" for bucket in FILL}
    names |= {f"{what}:2**{bits}" for what in ("batch", "pool", "tokens") for bits in range(24)}
    names |= {"status:agree", "status:outside contract", "status:diverge"}
    names |= {f"diverge:{kind}:{phase}" for kind in KINDS for phase in PHASES + ("new page", "")}
    names |= {f"outside:{kind}" for kind in OUTSIDE}
    return sorted(names)


def fuzz_features(case: Case, outcomes: list[Outcome]) -> Counter:
    found = case_features(case)  # decoded cases are valid by construction
    for outcome in outcomes:
        found[f"status:{outcome.status}"] += 1
        if outcome.divergence is not None:
            found[f"diverge:{outcome.divergence.signature[2]}:"
                  f"{outcome.divergence.signature[3]}"] += 1
        found.update(f"outside:{kind}" for kind in outcome.outside)
    return found


def case_features(case: Case) -> Counter:
    """Features of a valid case: edge classes, phases per request, pool fill, sizes."""
    found = Counter(f"edge:{name}" for name in edge_classes(case))
    page_size = case.page_size
    for q, s in zip(case.prefixes(), case.seq_lens):
        mask = _phase_mask(q, s, page_size)
        found[f"phases:{mask}"] += 1
        for bit, phase in enumerate(PHASES):
            if mask >> bit & 1:
                found[f"phase:{phase}"] += 1
    found[f"fill:{_fill(pages_needed(case), len(case.free_pages))}"] += 1
    found[f"batch:2**{case.batch_size.bit_length()}"] += 1
    found[f"pool:2**{len(case.free_pages).bit_length()}"] += 1
    found[f"tokens:2**{min(23, case.contract_out_len().bit_length())}"] += 1
    return found


def _phase_mask(q: int, s: int, page_size: int) -> int:
    """Bit i set when the request writes a token in phase PHASES[i] (oracle model's phase_of)."""
    ceil_q = ceil_pages(q, page_size) * page_size
    floor_s = s // page_size * page_size
    mask = 1 if q < min(s, ceil_q) else 0
    mask |= 2 if max(q, ceil_q) < floor_s else 0
    mask |= 4 if max(q, ceil_q, floor_s) < s else 0
    return mask


def _fill(demand: int, pool: int) -> str:
    if pool == 0:
        return "pool empty"
    if demand == 0:
        return "fill 0"
    if demand >= pool:
        return "fill 100%"
    return ("fill <25%", "fill <50%", "fill <75%", "fill <100%")[4 * demand // pool]
