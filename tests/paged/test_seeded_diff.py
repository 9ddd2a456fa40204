"""The 20,000-case seeded diff per bundled implementation and target, sharded so that
`pytest -n auto` spreads it over cores (xdist splits by test item, never inside one). A shard
generates each case once and judges it with every bundled implementation of its target (the
paged generator's cases depend on no implementation); a shard per implementation through
`run_chunk` generated the same cases once per implementation, about a quarter of its time
(`run_chunk` itself is the mutants' path, tests/paged/test_mutants.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from kvfuzz.fuzz.engine.target import AGREE, OUTSIDE_CONTRACT
from kvfuzz.fuzz.targets import TARGETS
from tests.helpers import bundled, fail_with

pytestmark = pytest.mark.slow

NUM_CASES = 20_000
NUM_SHARDS = 10
SEED = 0


def shards():
    size = NUM_CASES // NUM_SHARDS
    for target in ("extend", "decode"):
        for shard in range(NUM_SHARDS):
            yield pytest.param(target, shard * size, (shard + 1) * size, id=f"{target}-{shard}")


@pytest.mark.parametrize("target, start, stop", list(shards()))
def test_seeded_cases_agree_with_oracle(target, start, stop):
    owner, impls = TARGETS[target], list(bundled(target))
    assert impls
    tally = {impl.name: Counter() for impl in impls}
    for index in range(start, stop):
        case = owner.generator.generate(SEED, index)
        for impl in impls:
            outcome = owner.check(case, impl, "cpu")
            if outcome.divergence is not None:
                fail_with(outcome.divergence)
            tally[impl.name][outcome.status] += 1
    for counts in tally.values():
        assert counts[AGREE] + counts[OUTSIDE_CONTRACT] == stop - start, counts
