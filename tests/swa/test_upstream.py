"""The released upstream SWATokenToKVPoolAllocator (sglang 0.5.23) through the same lock step: every
trace of its own profile runs to its last op; what it declares its callers never do (a decode
that one pool cannot serve, which SGLang's scheduler checks for first) is outside its contract,
and undeclared, kvfuzz reports what it then does: the other pool's new page is lost."""

import functools

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.swa.target import SWA
from kvfuzz.fuzz.engine.target import AGREE, OUTSIDE_CONTRACT
from kvfuzz.impl.swa import RELEASED
from kvfuzz.strategies.swa.trace import Admit, Decode, Extend, Trace
from tests.conftest import CORPUS
from kvfuzz.impl.registry import load_attribute
from tests.helpers import divergence, fail_with, needs_engine

pytestmark = needs_engine("sglang")
SGLANG = SWA.catalogue.resolve("sglang.swa")


@functools.cache
def doubles() -> dict:
    """Test doubles of the released class, built on first use (never at collection)."""
    SWATokenToKVPoolAllocator = load_attribute(
        "sglang.srt.mem_cache.allocator.swa:SWATokenToKVPoolAllocator")

    class Undeclared(SWATokenToKVPoolAllocator):
        """The released class under another name: no catalogue entry, so no declared
        preconditions."""
    return {"Undeclared": Undeclared}


def __getattr__(name):  # the doubles by import path: tests.swa.test_upstream:Undeclared
    if name in ("Undeclared",):
        return doubles()[name]
    raise AttributeError(name)


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(2))
def test_every_seeded_trace_runs_to_its_last_op_on_upstream(shard):
    assert SWA.catalogue.resolve(RELEASED) is SGLANG
    for index in range(shard * 250, (shard + 1) * 250):
        outcome = SWA.check(SWA.generator.generate(0, index, [SGLANG]), SGLANG)
        if outcome.status != AGREE:
            assert outcome.divergence is not None, outcome.outside
            fail_with(outcome.divergence)


def test_an_unchecked_decode_short_on_one_pool_loses_a_page_when_undeclared():
    # Two full pages, one SWA page: the decode opens a page, which only the full pool has.
    trace = Trace(4, 8, 4, False, (Admit(1), Extend((1,), (4,)), Decode((), checked=False)))
    assert SWA.check(trace, SGLANG).status == OUTSIDE_CONTRACT
    undeclared = SWA.catalogue.declared(SWA.catalogue.resolve(f"{__name__}:Undeclared"), doubles()["Undeclared"])
    found = divergence("swa", trace, undeclared)
    assert found is not None and found.what.startswith("full_available_size"), \
        found and found.report()
    report = found.report()
    assert "full_available_size: expected 4, actual 0" in report.replace("  ", " ") or \
        "expected 4, actual 0" in report, report
    assert "full pool: 1 pages neither free, staged, pending nor held (lost)" in report, report


def test_the_corpus_replays_clean_on_upstream():
    files = [path for path in corpus.input_files([CORPUS]) if path.name.startswith("swa-")]
    agreed = 0
    for path in files:
        _, trace = corpus.load(path)
        outcome = SWA.check(trace, SGLANG)
        if outcome.status not in (AGREE, OUTSIDE_CONTRACT):
            outcome.divergence.saved_path = str(path)
            fail_with(outcome.divergence, save=False)
        agreed += outcome.status == AGREE
    assert agreed >= 5
