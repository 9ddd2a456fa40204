"""The 20,000-case seeded diff per bundled implementation and target, sharded so that
`pytest -n auto` spreads it over cores (xdist splits by test item, never inside one)."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine.run import run_chunk
from tests.helpers import bundled, fail_with

pytestmark = pytest.mark.slow

NUM_CASES = 20_000
NUM_SHARDS = 10
SEED = 0


def shards():
    size = NUM_CASES // NUM_SHARDS
    for target in ("extend", "decode"):
        for impl in bundled(target):
            for shard in range(NUM_SHARDS):
                yield pytest.param(target, impl.name, shard * size, (shard + 1) * size,
                                   id=f"{target}-{impl.name}-{shard}")


@pytest.mark.parametrize("target, impl_name, start, stop", list(shards()))
def test_seeded_cases_agree_with_oracle(target, impl_name, start, stop):
    tally = run_chunk(target, impl_name, SEED, start, stop, "cpu")
    if tally.divergence is not None:
        fail_with(tally.divergence)
    assert tally.cases == stop - start
    assert tally.agree + tally.outside == tally.cases
