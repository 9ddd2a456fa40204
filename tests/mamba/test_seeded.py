"""The bundled Mamba slot allocator agrees with the oracle on 2,000 seeded traces (`slow`), and
the traces reach every edge class the lock step counts, the group-protocol misuse included."""

from collections import Counter

import pytest

from kvfuzz.fuzz.mamba.target import MAMBA
from kvfuzz.fuzz.engine.target import AGREE
from tests.helpers import fail_with

BUNDLED = MAMBA.catalogue.resolve("mamba.torch")


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(4))
def test_bundled_slot_allocator_agrees_on_2000_seeded_traces(shard):
    for index in range(shard * 500, (shard + 1) * 500):
        outcome = MAMBA.check(MAMBA.generator.generate(0, index), BUNDLED)
        if outcome.status != AGREE:
            fail_with(outcome.divergence)


def test_seeded_traces_reach_every_edge_class():
    events = Counter()
    for index in range(40):
        events.update(MAMBA.check(MAMBA.generator.generate(0, index), BUNDLED).features)
    assert set(MAMBA.judge.lockstep.EVENTS) <= set(events), sorted(set(MAMBA.judge.lockstep.EVENTS) - set(events))
