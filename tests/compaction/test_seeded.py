"""Seeded plain-random compaction traces against the oracle, op for op, with invariants I1-I11,
and I12 (eager vs lazy). Sharded so `pytest -n auto` spreads them over workers.

Traces per implementation: 1,000 (the issue's bar) under the nightly hypothesis profile, its
first 500 under ci (`tests/bars.py`), 200 under dev; KVFUZZ_COMPACTION_TRACES overrides them.
Cost: about 45 ms of CPU per trace.
"""

import os

import pytest

from kvfuzz.strategies.compaction.generator import generate
from tests.bars import bar
from tests.compaction.sides import i12, op_by_op

pytestmark = pytest.mark.slow

_FULL = os.environ.get("HYPOTHESIS_PROFILE", "dev") in ("ci", "nightly")
NUM_TRACES = int(os.environ.get("KVFUZZ_COMPACTION_TRACES", bar(1000) if _FULL else 200))
SHARDS = 16
SEED = 0


def _indices(shard: int, count: int = NUM_TRACES) -> range:
    return range(shard, count, SHARDS)


@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("impl", ["compaction.lazy", "compaction.eager"])
def test_seeded_traces_agree_with_the_oracle(impl, shard):
    for index in _indices(shard):
        found = op_by_op(generate(SEED, index), impl)
        assert found is None, found


@pytest.mark.parametrize("shard", range(SHARDS))
def test_eager_and_lazy_end_with_the_same_live_data(shard):
    for index in _indices(shard, NUM_TRACES // 4):
        found = i12(generate(SEED, index))
        assert found is None, found


@pytest.mark.parametrize("sides", [("oracle.lazy", "oracle.eager")])
def test_the_oracle_itself_satisfies_i12(sides):
    for index in range(0, NUM_TRACES // 10):
        found = i12(generate(SEED, index), *sides)
        assert found is None, found


def test_the_per_page_commit_agrees_with_the_oracle():
    for index in range(NUM_TRACES // 20):
        found = op_by_op(generate(SEED, index), "compaction.before")
        assert found is None, found
