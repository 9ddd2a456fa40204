"""The bundled SWA allocator agrees with the oracle on 2,000 seeded traces (`slow`), and the
traces reach every edge class the lock step counts: allocations short on one pool only, window
evictions and releases inside free groups, the group protocol misused."""

from collections import Counter

import pytest

from kvfuzz.fuzz.swa.target import SWA
from kvfuzz.fuzz.engine.target import AGREE
from tests.helpers import fail_with

BUNDLED = SWA.catalogue.resolve("swa.torch")


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(4))
def test_bundled_swa_allocator_agrees_on_2000_seeded_traces(shard):
    for index in range(shard * 500, (shard + 1) * 500):
        outcome = SWA.check(SWA.generator.generate(0, index), BUNDLED)
        if outcome.status != AGREE:
            fail_with(outcome.divergence)


def test_seeded_traces_reach_every_edge_class():
    events = Counter()
    for index in range(60):
        events.update(SWA.check(SWA.generator.generate(0, index), BUNDLED).features)
    assert set(SWA.judge.lockstep.EVENTS) <= set(events), sorted(set(SWA.judge.lockstep.EVENTS) - set(events))
