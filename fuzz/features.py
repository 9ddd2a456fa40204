"""Allocator-state features made visible to atheris: one tiny function per feature.

Atheris sees Python coverage only (never torch's C++), so two cases that exercise the allocator
differently often run the same Python lines. The trick: every feature (an edge class hit, a
phase a request takes, a pool fill bucket, an outcome) gets its own generated function, a
distinct code object that `instrument()` hands to `atheris.instrument_func`. Calling it covers a
new basic block, so libFuzzer keeps the input that first reached the feature, and its hit-count
buckets (1, 2, 3, 4-7, 8-15, ...) also reward reaching a feature more often in one input.
Without atheris, `touch` is a cheap no-op-like call.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.oracle.paged.contract import (BAD_PAGE_ID, DUPLICATE_PAGES, LAST_LOC, OUT_LEN, POOL_SHORT,
                             SEQ_BELOW_PREFIX, pages_needed)
from kvfuzz.oracle.paged.model import CURRENT_PAGE, LAST_PARTIAL_PAGE, WHOLE_PAGES, ceil_pages
from kvfuzz.strategies.paged.edges import CLASSES, edge_classes

PHASES = (CURRENT_PAGE, WHOLE_PAGES, LAST_PARTIAL_PAGE)
FILL = ("pool empty", "fill 0", "fill <25%", "fill <50%", "fill <75%", "fill <100%", "fill 100%")
KINDS = ("raised", "wrong slot", "not written", "mutated input")
OUTSIDE = (SEQ_BELOW_PREFIX, LAST_LOC, OUT_LEN, POOL_SHORT, BAD_PAGE_ID, DUPLICATE_PAGES)


def _all_names() -> list[str]:
    names = {f"edge:{name}" for classes in CLASSES.values() for name in classes}
    names |= {f"phase:{phase}" for phase in PHASES}
    names |= {f"phases:{mask}" for mask in range(8)}
    names |= {f"fill:{bucket}" for bucket in FILL}
    names |= {f"{what}:2**{bits}" for what in ("batch", "pool", "tokens") for bits in range(24)}
    names |= {"status:agree", "status:outside contract", "status:diverge"}
    names |= {f"diverge:{kind}:{phase}" for kind in KINDS for phase in PHASES + ("new page", "")}
    names |= {f"outside:{kind}" for kind in OUTSIDE}
    return sorted(names)


def _make(name: str):
    # exec gives each feature its own code object; a shared one would share one counter.
    scope: dict = {}
    exec(compile("def feature():\n    return None\n", f"<feature {name}>", "exec"), scope)
    return scope["feature"]


FEATURES = {name: _make(name) for name in _all_names()}


def instrument() -> None:
    """Give every feature function its atheris counter; call before `atheris.Setup`."""
    import atheris

    for function in FEATURES.values():
        atheris.instrument_func(function)


def touch(name: str, times: int = 1) -> None:
    function = FEATURES.get(name)
    if function is not None:
        for _ in range(min(times, 64)):  # past 64 the hit-count bucket no longer changes much
            function()


def case_features(case) -> Counter:
    """Features of a valid case: edge classes, phases per request, pool fill, sizes."""
    found = Counter(f"edge:{name}" for name in edge_classes(case))
    page_size = case.page_size
    prefixes = case.prefix_lens if case.target == "extend" else [s - 1 for s in case.seq_lens]
    for q, s in zip(prefixes, case.seq_lens):
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
    """Bit i set when the request writes a token in phase PHASES[i] (oracle.paged.phase_of)."""
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
    quarter = 4 * demand // pool
    return ("fill <25%", "fill <50%", "fill <75%", "fill <100%")[quarter]


def outcome_features(outcome) -> list[str]:
    found = [f"status:{outcome.status}"]
    if outcome.divergence is not None:
        found.append(f"diverge:{outcome.divergence.kind}:{outcome.divergence.phase}")
    found += [f"outside:{violation.kind}" for violation in outcome.violations]
    return found
