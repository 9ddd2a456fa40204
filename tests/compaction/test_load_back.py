"""HiCache load-back reservations on the compaction target (SGLang's `alloc_physical` and its
rollback `cancel_physical_reservation`, as the released `MultiEndedAllocator` keeps them): pages
taken like an allocation's but bound to no vid, handed to no one else, counted in the span and
`live`; no page moves while one is held; a rollback makes them holes; a `clear` drops them all.
Each property has a broken side that the lock step catches at the op that breaks it."""

import pytest
import torch

from kvfuzz.fuzz.compaction.target import COMPACTION, NO_LOAD_BACK
from kvfuzz.fuzz.engine import corpus
from kvfuzz.impl.compaction.allocator import TorchCompaction, lazy
from kvfuzz.impl.compaction.pool import LazyPool
from kvfuzz.oracle.compaction.model import CompactionModel
from kvfuzz.strategies.compaction import generator
from kvfuzz.strategies.compaction.trace import (Alloc, Clear, Flush, Free, Params, Pick, Release,
                                                Reserve, Trace)
from tests.compaction.sides import op_by_op, run_trace
from tests.conftest import CORPUS
from tests.helpers import divergence, with_engine

PARAMS = Params(total_bytes=8 * 20, epp_up=8, epp_down=8, sink_bytes=8, two_ended=True,
                move_cap=2)
# Holes, a reservation that takes one (op 2), an urgent flush it blocks (3), the down pool
# short of room asking the blocked up pool to flush (5), the rollback (6), flushes that move
# again (7, 9), and a clear of every pool with reservations held (11).
LOAD_BACK = Trace(PARAMS, (
    Alloc("up", 6), Free("up", Pick("bottom", 2)), Reserve("up", 1), Flush("up", urgent=True),
    Free("up", Pick("middle", 1)), Alloc("down", 1, relative=True), Release("up", "oldest"),
    Flush("up", urgent=False), Reserve("down", 1), Flush("up", urgent=True),
    Reserve("up", 2), Clear(None), Alloc("up", 3), Flush("up", urgent=True)))
CORPUS_FILE = "compaction-a5865f1790e75d13.json"  # shrunk: a reservation, then a clear of all


def test_the_model_reserves_blocks_moves_and_rolls_back():
    model = CompactionModel(Params(**{**vars(PARAMS), "two_ended": False}), lazy=True)
    vids = model.alloc("up", 5)
    model.free("up", vids[:2])                    # holes at the base: pages 1 and 2
    assert model.reserve("up", 3) == [1, 2, 6]   # the holes first, then the frontier
    snap = model.snapshot("up")
    assert (snap.reserved, snap.loading, snap.live, snap.holes) == ((1, 2, 6), 3, 6, ())
    model.free("up", vids[2:3])                  # a hole under live pages
    assert model.flush("up", urgent=True) == 0 and model.snapshot("up").holes == (3,)
    assert model.release("up", "oldest") == [1, 2, 6]
    assert model.snapshot("up").loading == 0 and model.flush("up", urgent=True) > 0
    model.reserve("up", 2)
    model.clear("up")
    assert (model.snapshot("up").reserved, model.snapshot("up").loading) == ((), 0)


@pytest.mark.parametrize("impl", ["compaction.lazy", "compaction.eager", "compaction.before"])
def test_the_load_back_trace_agrees_on_kvfuzz_implementations(impl):
    assert op_by_op(LOAD_BACK, impl) is None


class _MovesWhileReserved(LazyPool):
    """Compacts with a reservation held (the gate forgotten)."""

    def flush(self, urgent: bool) -> int:
        loading, self.loading = self.loading, 0
        try:
            return super().flush(urgent)
        finally:
            self.loading = loading


def _moves_while_reserved(params, device="cpu"):
    return TorchCompaction(params, lazy=True, pool_class=_MovesWhileReserved, device=device)


def _hands_reserved_pages_out(params, device="cpu"):
    """Leaves a reservation's pages among the holes, for the next allocation to take."""
    side = lazy(params, device)
    reserve = side.reserve

    def leaky(name, n):
        pages = reserve(name, n)
        if pages:
            pool = side.pools[name]
            pool.holes = torch.cat((pool.holes, pool.to_device(pages)))
        return pages
    side.reserve = leaky
    return side


def _rollback_loses_pages(params, device="cpu"):
    """A rollback that forgets the reservation without making its pages holes."""
    side = lazy(params, device)

    def forget(name, which):
        pool = side.pools[name]
        pages = pool.reservations.pop(0 if which == "oldest" else -1)
        pool.loading -= pages.numel()
    side.release = forget
    return side


@pytest.mark.parametrize("factory, op_index, label", [
    (_moves_while_reserved, 3, "reserved for a load-back"),
    (_hands_reserved_pages_out, 2, "I4 reserved pages"),
    (_rollback_loses_pages, 6, "field holes"),
    ("mutant.compaction.clear_keeps_reservations", 11, "field reserved")])
def test_a_load_back_contract_broken_is_caught_where_it_breaks(factory, op_index, label):
    if isinstance(factory, str):
        factory = COMPACTION.catalogue.resolve(factory).load()
    problems = run_trace(Trace(PARAMS, LOAD_BACK.ops[:op_index + 1]), factory)
    assert problems is not None and any(label in text for text in problems), problems
    assert run_trace(Trace(PARAMS, LOAD_BACK.ops[:op_index]), factory) is None


def test_the_committed_file_kills_the_clear_that_keeps_reservations():
    trace = corpus.load(CORPUS / CORPUS_FILE)[1]
    found = divergence("compaction", trace, "mutant.compaction.clear_keeps_reservations")
    assert found is not None and "field reserved" in found.report()
    assert op_by_op(trace, "compaction.lazy") is None


def test_version_4_is_version_3_wherever_it_reserves_nothing():
    reserving = 0
    for index in range(12):
        trace = generator.VERSION_4.generate(0, index)
        reserves = any(isinstance(op, Reserve) for op in trace.ops)
        reserving += reserves
        if not reserves:
            assert trace.ops == generator.VERSION_3.generate(0, index).ops, index
        assert len(trace.ops) == 300
    assert 0 < reserving < 12
    assert generator.VERSION_4.generate(0, 0).origin.generator == "compaction/4"


def test_a_side_without_reservations_gets_version_3_and_no_reserving_file():
    impl = COMPACTION.catalogue.resolve("compaction.lazy")
    bare = type(impl)(**{**vars(impl), "preconditions": (NO_LOAD_BACK,)})
    assert COMPACTION.generator.generate(0, 3, [bare]) == generator.VERSION_3.generate(0, 3)
    assert COMPACTION.generator.generate(0, 3, [impl]) == generator.generate(0, 3)
    assert any(isinstance(op, Reserve) for op in generator.generate(0, 3).ops)
    outcome = COMPACTION.check(LOAD_BACK, bare)
    assert outcome.divergence is None and outcome.outside


@with_engine("sglang")
def test_the_released_class_keeps_the_load_back_contract_and_its_clear_mutant_is_caught():
    assert op_by_op(LOAD_BACK, "sglang.compaction.lazy") is None
    assert op_by_op(LOAD_BACK, "sglang.compaction.eager") is None
    trace = corpus.load(CORPUS / CORPUS_FILE)[1]
    found = divergence("compaction", trace, "mutant.sglang.compaction.clear_keeps_load_count")
    assert found is not None and "field loading" in found.report()


def test_a_release_without_alloc_physical_declares_no_load_back(monkeypatch):
    """What `as_installed` reads from an earlier release's adapted class (0.5.15-0.5.21)."""
    import sys
    import types

    from kvfuzz.fuzz.compaction import target

    impl = COMPACTION.catalogue.resolve("compaction.lazy")
    for has_it, expected in ((False, (NO_LOAD_BACK,)), (True, ())):
        module = types.ModuleType("kvfuzz_test_adapter")
        module.MultiEndedAllocator = type("MultiEndedAllocator", (), {
            "alloc_physical": (lambda self, n: None)} if has_it else {})
        monkeypatch.setitem(sys.modules, module.__name__, module)

        def factory(params, device="cpu"):
            return None
        factory.__module__ = module.__name__
        assert target._declare(impl, factory).preconditions == expected
