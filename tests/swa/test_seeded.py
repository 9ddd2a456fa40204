"""The bundled SWA allocator agrees with the oracle on 2,000 seeded traces, and the first 60
reach every edge class the lock step counts: allocations short on one pool only, window
evictions and releases inside free groups, the group protocol misused. Each trace is judged once:
the first 60 (the quick tier's test) with their edge classes counted, the other 1,940 (`slow`) in
4 shards. (The generator gives swa.torch the traces it gives no implementation.)"""

from collections import Counter

import pytest

from tests.helpers import TARGETS, fail_with

TRACES, SHARDS, REACH = 2000, 4, 60


def _agree(indices) -> Counter:
    """The edge classes of traces `indices`, each agreeing (or failing with its report)."""
    owner, events = TARGETS["swa"], Counter()
    impl = owner.catalogue.resolve("swa.torch")
    for index in indices:
        outcome = owner.check(owner.generator.generate(0, index, [impl]), impl)
        if outcome.status != "agree":
            assert outcome.divergence is not None, outcome.outside
            fail_with(outcome.divergence)
        events.update(outcome.features)
    return events


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(SHARDS))
def test_it_agrees_on_2000_seeded_traces(shard):
    size = TRACES // SHARDS
    _agree(range(max(REACH, shard * size), (shard + 1) * size))


def test_the_first_seeded_traces_agree_and_reach_every_edge_class():
    events = _agree(range(REACH))
    declared = set(TARGETS["swa"].judge.lockstep.EVENTS)
    assert declared <= set(events), sorted(declared - set(events))
