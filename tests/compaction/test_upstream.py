"""The released upstream MultiEndedAllocator (sglang 0.5.23), a grow-up and a grow-down pool on one
UnifiedKVPool, lazy and eager, through its adapter (impl/compaction/upstream.py) and the same
lock step as kvfuzz's own: every seeded trace agrees op for op, I12 included. Where upstream
differs from the spec (which freed pages an allocation reuses), the oracle follows upstream when
the adapter says so, and the property sees the difference when it does not."""

import pytest
import torch

from kvfuzz.fuzz.compaction.target import COMPACTION
from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.oracle.compaction.model import CompactionModel
from kvfuzz.strategies.compaction.trace import Params
from tests.compaction.sides import run_trace
from tests.compaction.sides import i12
from tests.helpers import divergence, fail_with, needs_engine

pytestmark = needs_engine("sglang")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["lazy", "eager"])
def test_every_seeded_trace_agrees_on_upstream(mode):
    impl = COMPACTION.catalogue.resolve(f"sglang.compaction.{mode}")
    for index in range(60):
        outcome = COMPACTION.check(COMPACTION.generator.generate(0, index), impl)
        if outcome.status != AGREE:
            fail_with(outcome.divergence)


def test_upstream_lazy_and_bundled_eager_keep_the_same_data_i12():
    for index in range(10):
        trace = COMPACTION.generator.generate(3, index)
        assert i12(trace, "sglang.compaction.lazy", "compaction.eager") is None, index


def test_the_oracle_takes_freed_pages_in_either_order():
    params = Params(total_bytes=214, epp_up=6, epp_down=4, sink_bytes=6, two_ended=False,
                    move_cap=4)
    for take, left in (("front", [4]), ("base_end", [5])):
        model = CompactionModel(params, lazy=True, take=take)
        vids = model.alloc("up", 6)
        model.free("up", [vids[v - 1] for v in (2, 5, 4)])  # pages 2, 5, 4, in that order
        model.alloc("up", 2)
        assert model.pools["up"].holes == left, take


def test_upstream_told_to_follow_the_spec_order_is_caught_on_the_holes():
    upstream = COMPACTION.catalogue.resolve("sglang.compaction.lazy").load()

    def spec_order(params, device="cpu"):
        side = upstream(params, device)
        side.hole_take = "front"
        return side

    found = next((f for f in (run_trace(COMPACTION.generator.generate(0, i), spec_order)
                              for i in range(20)) if f is not None), None)
    assert found is not None, "the take order never mattered in 20 traces"
    # Which page each vid got (v2p), and which holes are left where only some were taken.
    assert any("field holes" in problem or "field v2p" in problem for problem in found), found


@pytest.mark.parametrize("name, label", [
    ("mutant.sglang.compaction.kv_not_moved", "I7"),
    ("mutant.sglang.compaction.pending_overwritten", "field pending"),
    ("mutant.sglang.compaction.takes_from_the_far_end", "field holes"),
    ("mutant.sglang.compaction.pages_not_zeroed", "fresh page"),
    ("mutant.sglang.compaction.clear_keeps_pending", "field pending"),
    ("mutant.sglang.compaction.clear_keeps_group", "field group"),
])
def test_upstream_mutant_is_caught_with_a_shrunk_report(name, label):
    impl = COMPACTION.catalogue.resolve(name)
    found = next((d for d in (divergence("compaction", COMPACTION.generator.generate(0, i), impl)
                              for i in range(60)) if d is not None), None)
    assert found is not None, f"{name}: no divergence in 60 seeded traces"
    small = shrink(COMPACTION, found, budget=(2000, 20.0))
    report = small.report()
    assert label in report and len(small.input.ops) <= 12, report
    assert f"kvfuzz replay corpus/compaction-{small.input.trace_id()}.json --impl {name}" \
        in report
    original = COMPACTION.catalogue.resolve("sglang.compaction.lazy")
    assert COMPACTION.check(small.input, original).status == AGREE


def test_an_allocator_that_keeps_the_callers_freed_ids_is_caught():
    # The adapter writes -99 over the tensor it passed to free() once the call returns, as a
    # scheduler reuses its buffers; this allocator adopts that tensor as its free-id list when
    # the list was empty (a "no concatenation needed" shortcut).
    from kvfuzz.impl.compaction.upstream import MultiEndedAllocator, UpstreamCompaction

    class AdoptsFreedIds(MultiEndedAllocator):
        def free(self, free_index):
            empty = self.free_virtual_ids.numel() == 0
            super().free(free_index)
            if empty and torch.equal(self.free_virtual_ids, free_index):
                self.free_virtual_ids = free_index

    def factory(params, device="cpu"):
        return UpstreamCompaction(params, True, device, AdoptsFreedIds)

    found = next((f for f in (run_trace(COMPACTION.generator.generate(0, i), factory)
                              for i in range(60)) if f is not None), None)
    assert found is not None, "no trace freed into an empty free-id list"
    assert any("-99" in problem for problem in found), found


def test_which_holes_an_allocation_takes_is_read_from_the_release():
    # 0.5.20-0.5.22 drain `_free_phys_pages` from the front, in free order (the spec's policy);
    # 0.5.23 sorts and takes from the pool's own end (`_take_free_pages_from_end`).
    from kvfuzz.impl.compaction.upstream import MultiEndedAllocator, hole_take

    assert hole_take(MultiEndedAllocator) == "base_end"
    assert hole_take(type("Release0522", (), {"_flush_impl": None})) == "front"
    params = COMPACTION.generator.generate(0, 0).params
    assert COMPACTION.catalogue.resolve("sglang.compaction.lazy").load()(params).hole_take \
        == "base_end"


def test_the_pass_without_the_fresh_page_property_sees_past_an_unzeroed_page_alone():
    # N's shrunk trace (corpus/history/sglang-0.5.22/): a page handed out with its last owner's
    # bytes. The mutant that hands pages out so is caught there by the fresh-page check, and by
    # nothing else: the entry without that check runs it clean; a fault behind it (KV rows not
    # moved by a flush) is still caught without it.
    import json
    from pathlib import Path

    from kvfuzz.impl.compaction import upstream, upstream_mutants

    def unzeroed(name):
        allocator = upstream_mutants.__getattr__(name).args[1]

        def factory(params, device="cpu"):
            return upstream.UpstreamCompaction(params, True, device, allocator, zeroes=False)
        return factory

    path = Path("corpus/history/sglang-0.5.22/compaction-f230049eabf30eaa.json")
    trace = COMPACTION.codec.from_json(json.loads(path.read_text()))
    found = run_trace(trace, COMPACTION.catalogue.resolve(
        "mutant.sglang.compaction.pages_not_zeroed").load())
    assert found and any("reads" in problem for problem in found), found
    assert run_trace(trace, unzeroed("pages_not_zeroed")) is None
    entry = COMPACTION.catalogue.resolve("sglang.compaction.lazy.unzeroed")
    assert COMPACTION.check(trace, entry).status == AGREE
    moved = next((f for f in (run_trace(COMPACTION.generator.generate(0, i),
                                        unzeroed("kv_not_moved")) for i in range(60)) if f),
                 None)
    assert moved and any("I7" in problem for problem in moved), moved
