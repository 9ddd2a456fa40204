"""The bundled SWA allocator agrees with the oracle on 2,000 seeded traces, and the first 60
reach every edge class the lock step counts: allocations short on one pool only, window
evictions and releases inside free groups, the group protocol misused. Each trace is judged once:
the first 60 (the quick tier's test) with their edge classes counted, the other 1,940 (`slow`) in
4 shards. (The generator gives swa.torch the traces it gives no implementation.)"""

from collections import Counter

import pytest

from tests.helpers import TARGETS, assert_seeded_traces_agree

TRACES, SHARDS, REACH = 2000, 4, 60


def _agree(indices) -> Counter:
    """The edge classes of traces `indices`, each agreeing (or failing with its report)."""
    impl = TARGETS["swa"].catalogue.resolve("swa.torch")
    return sum(map(Counter, assert_seeded_traces_agree("swa", impl, indices)), Counter())


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_it_agrees_on_2000_seeded_traces(shard):
    size = TRACES // SHARDS
    _agree(range(max(REACH, shard * size), (shard + 1) * size))


def test_the_first_seeded_traces_agree_and_reach_every_edge_class():
    events = _agree(range(REACH))
    declared = set(TARGETS["swa"].judge.lockstep.EVENTS)
    assert declared <= set(events), sorted(declared - set(events))
