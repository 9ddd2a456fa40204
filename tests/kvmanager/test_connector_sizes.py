"""The "connector sizes" profile (`strategies/kvmanager/connector_sizes.py`): a KV connector over
groups of different block sizes, drawn in the mix on a share of its own. Its traces are the
scheduler's shape (no vLLM needed); the released class runs them clean (`test_every_profile.py`);
its catalogue mutant, `external_to_scheduler_block`, is caught on them (`test_mutants.py`) and on no
trace of one block size (slow: vLLM)."""

from __future__ import annotations

import math
from collections import Counter

from kvfuzz.strategies.kvmanager import connector, connector_sizes, streams
from kvfuzz.strategies.kvmanager.connector_ops import EVERY_GROUP, Connect, Loaded
from tests.helpers import divergence, with_engine


def test_the_profiles_traces_are_a_connector_over_groups_of_different_block_sizes():
    made = Counter()
    for index in range(40):
        trace = connector_sizes.GENERATOR.generate(0, index)
        assert trace.note == "profile connector sizes"
        full, window = trace.sizes
        assert full != window and trace.window and trace.scheduler_block_size == \
            math.lcm(full, window)
        for op in trace.ops:
            if isinstance(op, Connect):
                made["asynchronous load" if op.load else "synchronous load"] += 1
                made["some groups"] += op.written != EVERY_GROUP
            elif isinstance(op, Loaded):
                # several groups: a failure is the request's whole (`failed_recving`)
                assert op.valid in (-1, 0), (index, op)
                made["load done" if op.valid < 0 else "load failed"] += 1
        made["zeroing"] += trace.zeroing
    assert all(made[kind] for kind in ("asynchronous load", "synchronous load", "some groups",
                                       "load done", "load failed", "zeroing")), made


def test_it_is_drawn_in_the_mix_on_a_share_of_its_own():
    # alone only until merged (2026-12-06), then a share by `STREAMS`' rule: 337 of seed 0 first
    assert streams.ALONE["connector sizes"] is connector_sizes.GENERATOR
    assert "connector sizes" not in streams.ALONE_ONLY and "connector sizes" in streams.profiles()
    assert [low for stream, low, _ in streams.STREAMS if stream is connector_sizes.GENERATOR] == \
        [0.2942]
    assert streams.GENERATOR.generate(0, 337).note == "profile connector sizes"


@with_engine("vllm")
def test_its_mutant_agrees_wherever_the_groups_share_a_block_size():
    """`external_to_scheduler_block` counts a group's external blocks to the scheduler block:
    with one block size that is the released expression, so the connector profile's traces
    (one size, beside a window or chunked-local group too) agree with it."""
    name = "mutant.vllm.kvmanager.external_to_scheduler_block"
    assert all(divergence("kvmanager", connector.GENERATOR.generate(0, index), name) is None
               for index in range(30))
