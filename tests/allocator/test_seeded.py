"""2,000 seeded allocator traces of 200 ops each against the bundled `PagedAllocator`, sharded so
`pytest -n auto` spreads them (xdist splits by test, never inside one); CI runs the first quarter
(`tests/bars.py`), a nightly run all of them."""

import pytest

from kvfuzz.strategies.allocator.generator import generate
from tests.bars import bar
from tests.helpers import divergence

pytestmark = pytest.mark.slow

TRACES, SHARDS, OPS = 2000, 40, 200
PER_SHARD = TRACES // SHARDS


@pytest.mark.parametrize("shard", range(bar(SHARDS)))
def test_bundled_allocator_agrees_with_the_oracle_on_seeded_traces(shard):
    for index in range(shard * PER_SHARD, (shard + 1) * PER_SHARD):
        trace = generate(0, index, num_ops=OPS)
        assert len(trace.ops) >= OPS
        found = divergence("allocator", trace, "allocator.torch")
        assert found is None, found.report()
