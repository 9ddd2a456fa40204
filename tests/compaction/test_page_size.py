"""Page sizes above 1 on the compaction target (SGLang's `MultiEndedAllocator` at `page_size` 2
and 4): the tables stay in pages, while `alloc`, `free` and the load-back reservation speak
tokens. An allocation returns every token of each vid, page by page; a free releases the
distinct pages its tokens fall in, ascending; a reservation of n pages returns their n x
page_size physical slots. Each property has a broken side the lock step catches where it
breaks, and a committed corpus file that kills it."""

import pytest

from kvfuzz.fuzz.compaction.target import COMPACTION, ONE_TOKEN_PAGES
from kvfuzz.fuzz.engine import corpus
from kvfuzz.oracle.compaction.model import CompactionModel
from kvfuzz.oracle.compaction.tokens import pages_freed, pages_named, tokens_of
from kvfuzz.strategies.compaction import generator
from kvfuzz.strategies.compaction.codec import from_json
from kvfuzz.strategies.compaction.trace import (Alloc, Free, Params, Pick, Release, Reserve,
                                                Trace, to_json)
from kvfuzz.strategies.inputs import FormatError
from tests.compaction.sides import op_by_op
from tests.conftest import CORPUS
from tests.helpers import divergence, with_engine

PARAMS = Params(total_bytes=8 * 20, epp_up=8, epp_down=8, sink_bytes=8, two_ended=True,
                move_cap=2, page_size=2)
# An allocation (op 0), a free whose picks name the pages out of order (1: the middle pages,
# then the top page, by depth), a reservation that takes the freed holes back (2), its rollback
# (3), and an allocation that takes the holes again (4).
PAGED = Trace(PARAMS, (
    Alloc("down", 5), Free("down", Pick("random", 3, salt=5)), Reserve("down", 2),
    Release("down", "oldest"), Alloc("down", 3)))
RESERVE_FILE = "compaction-94721e71b070b5f5.json"  # shrunk: one reservation of one page
FREE_FILE = "compaction-1f79e2ca2642b1f1.json"     # shrunk: an allocation, a free of three


def test_the_token_layout_of_pages():
    assert tokens_of([3, 1], 2) == [6, 7, 2, 3]
    assert tokens_of([3, 1], 1) == [3, 1]
    assert pages_freed([3, 1, 2], 1) == [3, 1, 2]   # page size 1: as named
    assert pages_freed([3, 1, 2], 4) == [1, 2, 3]   # above: the distinct pages, ascending
    assert pages_named([7, 6, 2, 3, 6], 2) == [3, 1]


def test_the_model_frees_pages_ascending_above_page_size_1():
    for size, expected in ((1, [3, 1]), (2, [1, 3])):
        model = CompactionModel(Params(**{**vars(PARAMS), "page_size": size}), lazy=True)
        vids = model.alloc("up", 4)
        model.free("up", [vids[2], vids[0]])
        assert list(model.snapshot("up").free_vids[-2:]) == expected, size


def test_page_size_is_left_out_of_the_json_at_1_and_checked_above():
    assert "page_size" not in to_json(Trace(Params(), ()))["params"]
    data = to_json(PAGED)
    assert data["params"]["page_size"] == 2 and from_json(data) == PAGED
    for bad in (0, 65, "2"):
        with pytest.raises(FormatError, match="page_size"):
            from_json({**data, "params": {**data["params"], "page_size": bad}})


def test_version_5_is_version_4_wherever_its_pages_are_of_one_token():
    sizes = []
    for index in range(12):
        trace = generator.generate(0, index)
        sizes.append(trace.params.page_size)
        before = generator.VERSION_4.generate(0, index)
        assert trace.ops == before.ops, index
        assert trace.params == (before.params if trace.params.page_size == 1 else
                                Params(**{**vars(before.params),
                                          "page_size": trace.params.page_size}))
    assert set(sizes) == {1, 2, 4}
    assert generator.generate(0, 0).origin.generator == "compaction/5"


@pytest.mark.parametrize("name", ["compaction.lazy", "compaction.eager"])
def test_our_implementations_keep_the_paged_contract(name):
    assert op_by_op(PAGED, name) is None


@pytest.mark.parametrize("mutant, op_index, label", [
    ("mutant.compaction.frees_pages_as_named", 1, "field free_vids"),
    ("mutant.compaction.reserve_tokens_as_pages", 2, "result of reserve 2 pages")])
def test_a_paged_contract_broken_is_caught_where_it_breaks(mutant, op_index, label):
    problems = op_by_op(Trace(PARAMS, PAGED.ops[:op_index + 1]), mutant)
    assert problems is not None and any(label in text for text in problems), problems
    assert op_by_op(Trace(PARAMS, PAGED.ops[:op_index]), mutant) is None


@pytest.mark.parametrize("mutant, name, label", [
    ("mutant.compaction.frees_pages_as_named", FREE_FILE, "field free_vids"),
    ("mutant.compaction.reserve_tokens_as_pages", RESERVE_FILE, "result of reserve")])
def test_the_corpus_files_kill_the_mutants(mutant, name, label):
    trace = corpus.load(CORPUS / name)[1]
    assert trace.params.page_size == 2
    found = divergence("compaction", trace, mutant)
    assert found is not None and label in found.report()
    assert op_by_op(trace, "compaction.lazy") is None


@pytest.mark.slow
@with_engine("sglang")
def test_the_released_class_keeps_the_paged_contract_and_its_reservation_mutant_is_caught():
    for size in (2, 4):
        trace = Trace(Params(**{**vars(PARAMS), "page_size": size}), PAGED.ops)
        assert op_by_op(trace, "sglang.compaction.lazy") is None, size
        assert op_by_op(trace, "sglang.compaction.eager") is None, size
    trace = corpus.load(CORPUS / RESERVE_FILE)[1]
    found = divergence("compaction", trace, "mutant.sglang.compaction.reserve_pages_squared")
    assert found is not None and "result of reserve" in found.report()


def test_a_side_of_one_token_pages_gets_version_4_and_no_paged_file():
    assert COMPACTION.catalogue.declarable["one_token_pages"] == ONE_TOKEN_PAGES
    impl = COMPACTION.catalogue.resolve("compaction.lazy")
    impl = type(impl)(**{**vars(impl), "preconditions": (ONE_TOKEN_PAGES,)})
    assert COMPACTION.generator.generate(0, 0, [impl]) == generator.VERSION_4.generate(0, 0)
    assert generator.generate(0, 0).params.page_size == 2
    outcome = COMPACTION.check(PAGED, impl)
    assert outcome.divergence is None and outcome.outside
    assert not COMPACTION.check(Trace(Params(), PAGED.ops), impl).outside
