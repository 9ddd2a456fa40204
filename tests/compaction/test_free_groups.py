"""Free groups on the compaction target (SGLang's `free_group_begin` / `free_group_end`, as the
released `MultiEndedAllocator` keeps them): frees inside a group are deferred to its end, a nested
begin is refused, an end with no group does nothing, a `clear` forgets the group. Each property
has a broken side that the lock step catches."""

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.compaction.target import COMPACTION
from kvfuzz.oracle.compaction.model import CompactionModel, Refused
from kvfuzz.strategies.compaction import generator
from kvfuzz.strategies.compaction.trace import (Alloc, Clear, Free, GroupBegin, GroupEnd, Params,
                                                Pick, Trace)
from kvfuzz.strategies.sources import TraceGenerator
from tests.compaction.sides import op_by_op, run_trace
from tests.conftest import CORPUS
from tests.helpers import divergence

SINGLE = Params(total_bytes=8 * 17, epp_up=8, epp_down=8, sink_bytes=8, two_ended=False,
                move_cap=1)
# A step's frees in one group, a nested begin (refused), the end, a stray end.
GROUPED = Trace(SINGLE, (Alloc("up", 6), GroupBegin("up"), Free("up", Pick("bottom", 2)),
                         Free("up", Pick("bottom", 1)), GroupBegin("up"), Alloc("up", 2),
                         GroupEnd("up"), GroupEnd("up"), Alloc("up", 2)))
# A cache flush inside a group: the group is gone, the next free is at once.
CLEAR_IN_GROUP = Trace(SINGLE, (Alloc("up", 6), GroupBegin("up"), Free("up", Pick("bottom", 2)),
                                Clear(), Alloc("up", 3), Free("up", Pick("top", 1)),
                                GroupEnd("up"), Alloc("up", 1)))
CORPUS_FILE = "compaction-e0c1c1773fd64d93.json"  # shrunk: a begin, then a clear of every pool


def test_the_model_defers_refuses_and_forgets():
    model = CompactionModel(SINGLE, lazy=True)
    vids = model.alloc("up", 4)
    model.free_group_begin("up")
    model.free("up", vids[2:])
    model.free("up", vids[:1])
    assert model.snapshot("up").live == 4 and model.pools["up"].group == [vids[2], vids[3], vids[0]]
    with pytest.raises(Refused):
        model.free_group_begin("up")
    model.free_group_end("up")
    assert list(model.pools["up"].free_vids)[-3:] == [vids[2], vids[3], vids[0]]  # as they came
    assert model.snapshot("up").group is None and model.snapshot("up").live == 1
    model.free_group_begin("up")
    model.clear("up")
    assert model.snapshot("up").group is None


@pytest.mark.parametrize("impl", ["compaction.lazy", "compaction.eager", "compaction.before"])
def test_the_grouped_traces_agree_on_kvfuzz_implementations(impl):
    for trace in (GROUPED, CLEAR_IN_GROUP):
        assert op_by_op(trace, impl) is None, (impl, trace)


def test_a_clear_that_keeps_the_group_is_caught_at_the_clear():
    impl = "mutant.compaction.clear_keeps_group"
    found = divergence("compaction", CLEAR_IN_GROUP, impl)
    assert found is not None and found.step == 3, found and found.report()
    assert "field group" in found.report()
    trace = corpus.load(CORPUS / CORPUS_FILE)[1]  # the committed file kills it too
    assert divergence("compaction", trace, impl) is not None
    assert op_by_op(trace, "compaction.lazy") is None


def _frees_at_once(params, device="cpu"):
    """Keeps the group open but frees at once inside it (the deferral forgotten)."""
    from kvfuzz.impl.compaction.allocator import lazy

    side = lazy(params, device)
    free_tensor = side.free_tensor

    def at_once(name, vids):
        pool = side.pools[name]
        group, pool.group = pool.group, None
        free_tensor(name, vids)
        pool.group = group
    side.free_tensor = at_once
    return side


def _nested_restarts(params, device="cpu"):
    """Restarts the group on a nested begin, as SGLang 0.5.15-0.5.19 did (finding C)."""
    from kvfuzz.impl.compaction.allocator import lazy

    side = lazy(params, device)
    side.free_group_begin = lambda name: setattr(side.pools[name], "group", [])
    return side


@pytest.mark.parametrize("factory, op_index, label", [
    (_frees_at_once, 2, "field live"), (_nested_restarts, 4, "expected the call to be rejected")])
def test_a_group_contract_broken_is_caught(factory, op_index, label):
    problems = run_trace(Trace(SINGLE, GROUPED.ops[:op_index + 1]), factory)
    assert problems is not None and any(label in text for text in problems), problems
    assert run_trace(Trace(SINGLE, GROUPED.ops[:op_index]), factory) is None


def test_version_3_is_version_2_wherever_it_has_no_group():
    version_2 = TraceGenerator("compaction/2", generator._build_v2, 300, 300)
    grouped = 0
    for index in range(12):
        trace = generator.VERSION_3.generate(0, index)
        has_group = any(isinstance(op, GroupBegin) for op in trace.ops)
        grouped += has_group
        if not has_group:
            assert trace.ops == version_2.generate(0, index).ops, index
        assert len(trace.ops) == 300
    assert 0 < grouped < 12
    assert generator.VERSION_3.generate(0, 0).origin.generator == "compaction/3"
