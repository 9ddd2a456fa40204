"""The released upstream classes (sglang 0.5.23), PagedTokenToKVPoolAllocator and
TokenToKVPoolAllocator, through the same differential: each gets the traces it supports (its
declared preconditions) and every one runs to its last op; a trace it does not support is
outside its contract, never an excuse after a divergence."""

from collections import Counter
from dataclasses import replace

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.allocator.target import ALLOCATOR
from kvfuzz.fuzz.engine.target import AGREE, OUTSIDE_CONTRACT
from kvfuzz.impl.allocator import RELEASED, RELEASED_TOKEN
from kvfuzz.strategies.allocator.profile import KEEPS_PAGE_IDS
from kvfuzz.strategies.allocator.trace import (Admit, Clear, Decode, Extend, Finish, GroupBegin,
                                               GroupEnd, Misuse, Trace, Truncate)
from tests.conftest import CORPUS
from tests.helpers import divergence, fail_with, needs_engine

pytestmark = needs_engine("sglang")

PAGED, TOKEN = (ALLOCATOR.catalogue.resolve(name) for name in ("sglang.paged", "sglang.token"))
# 500 seeded traces of each class's own generator, in shards (`-n auto`); CI's README command 1
# step runs input 500 of each after them (`kvfuzz diff --upstream --start 500 --cases 1`; 1,000
# each until 2026-12-03, when CI's 30 minutes no longer fitted them).
SHARDS = [(PAGED, shard, 125) for shard in range(4)] + [(TOKEN, shard, 250) for shard in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("impl, shard, size", SHARDS,
                         ids=[f"{impl.name}-{shard}" for impl, shard, _ in SHARDS])
def test_every_seeded_trace_runs_to_its_last_op_on_upstream(impl, shard, size):
    for index in range(shard * size, (shard + 1) * size):
        outcome = ALLOCATOR.check(ALLOCATOR.generator.generate(0, index, [impl]), impl)
        if outcome.status != AGREE:  # a divergence, or a trace of its own it does not support
            assert outcome.divergence is not None, outcome.outside
            fail_with(outcome.divergence)


def test_upstream_by_import_path_gets_the_declared_preconditions():
    resolve = ALLOCATOR.catalogue.resolve
    assert resolve(RELEASED) is PAGED and resolve(RELEASED_TOKEN) is TOKEN
    names = [ALLOCATOR.generator.generator_for([impl]).name for impl in (PAGED, TOKEN)]
    assert names == ["allocator/3[P>=2,no-release-checks,checks-after-release]",
                     "allocator/3[token,no-release-checks]"]
    for index in range(20):
        assert ALLOCATOR.generator.generate(0, index, [PAGED]).page_size >= 2
        assert ALLOCATOR.generator.generate(0, index, [TOKEN]).interface == "token"


@pytest.mark.parametrize("trace, impl, why", [
    (Trace(1, 8, False, (Admit(1), Extend((1,), (3,)), Decode())), PAGED, "page size 1"),
    (Trace(4, 64, False, (Admit(1), Misuse("free_page0")), debug=True), PAGED,
     "misuse the class does not check: free_page0"),
    (Trace(1, 8, False, (Admit(1),), interface="token"),
     ALLOCATOR.catalogue.resolve("allocator.torch"),
     "a token-interface trace for a paged-interface class"),
    (Trace(4, 64, False, (Admit(1),)), TOKEN, "a paged-interface trace for a token-interface"),
])
def test_a_trace_a_class_does_not_support_is_outside_its_contract(trace, impl, why):
    outcome = ALLOCATOR.check(trace, impl)
    assert outcome.status == OUTSIDE_CONTRACT and outcome.behaviour == "not run"
    assert any(text.startswith(why) for text in outcome.outside), outcome.outside


@pytest.mark.parametrize("impl", [PAGED, TOKEN], ids=lambda impl: impl.name)
@pytest.mark.parametrize("need_sort", [False, True])
def test_upstream_follows_the_free_group_protocol(impl, need_sort):
    """A nested begin is rejected and changes nothing, an end with no group open does nothing,
    a clear() inside a group clears and closes it: each checked against the oracle."""
    P = 1 if impl is TOKEN else 4
    ops = (Admit(1), Extend((1,), (3 * P,)), Admit(2), Extend((2,), (2 * P,)), GroupBegin(),
           Misuse("group_begin_nested"), Finish(1), GroupEnd(), Misuse("group_end_unopened"),
           GroupBegin(), Truncate(2, P, "page_ids"), Clear(), Admit(3), Extend((3,), (5 * P,)),
           Finish(3, "segment"), Misuse("group_end_unopened"), Extend((2,), (P,)))
    trace = Trace(P, 8 * P, need_sort, ops, interface="token" if impl is TOKEN else "paged")
    assert divergence("allocator", trace, impl) is None
    events = ALLOCATOR.check(trace, impl).features
    assert events["misuse rejected: group_begin_nested"] == 1
    assert events["misuse accepted: group_end_unopened"] == 2
    assert events["clear in a group"] == 1


def test_upstream_rejects_a_bad_last_loc_like_the_oracle():
    ops = (Admit(1), Extend((1,), (5,)), Misuse("bad_last_loc", 0), Decode())
    assert divergence("allocator", Trace(4, 64, True, ops, debug=True), PAGED) is None


def test_upstream_keeps_the_page_ids_it_is_given_which_is_why_it_declares_so():
    """Released PagedTokenToKVPoolAllocator.free_page_ids with need_sort stages the caller's
    tensor itself. Every in-tree caller passes a fresh one, so the adapter declares it; without
    that declaration the ownership property reports it."""
    ops = (Admit(1), Extend((1,), (8,)), Finish(1, "page_ids"), Admit(2), Extend((2,), (40,)))
    trace = Trace(4, 40, True, ops)
    assert divergence("allocator", trace, PAGED) is None
    undeclared = replace(PAGED, preconditions=tuple(p for p in PAGED.preconditions
                                                    if p != KEEPS_PAGE_IDS))
    found = divergence("allocator", trace, undeclared)
    assert found is not None and "ownership" in dict(found.lines), found and found.report()


@pytest.mark.parametrize("impl", [PAGED, TOKEN], ids=lambda impl: impl.name)
def test_the_corpus_replays_clean_on_upstream(impl):
    """Every committed allocator trace either agrees or is outside the class's contract."""
    files = [path for path in corpus.input_files([CORPUS]) if path.name.startswith("allocator-")]
    statuses = Counter()
    for path in files:
        _, trace = corpus.load(path)
        outcome = ALLOCATOR.check(trace, impl)
        if outcome.status not in (AGREE, OUTSIDE_CONTRACT):
            outcome.divergence.saved_path = str(path)
            fail_with(outcome.divergence, save=False)
        statuses[outcome.status] += 1
    assert statuses[AGREE] >= 3, statuses  # some are this class's own traces
