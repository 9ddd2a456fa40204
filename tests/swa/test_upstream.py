"""The released upstream SWATokenToKVPoolAllocator (sglang 0.5.23) through the same lock step: every
trace of its own profile runs to its last op; what it declares its callers never do (a decode
that one pool cannot serve, which SGLang's scheduler checks for first) is outside its contract,
and undeclared, kvfuzz reports what it then does: the other pool's new page is lost."""

import pytest

from kvfuzz.fuzz.swa.target import SWA
from kvfuzz.fuzz.engine.target import OUTSIDE_CONTRACT
from kvfuzz.impl.swa import RELEASED
from kvfuzz.strategies.swa.trace import Admit, Decode, Extend, Trace
from tests.helpers import (assert_corpus_replays_clean, assert_seeded_traces_agree, divergence,
                           needs_engine, undeclared)

pytestmark = needs_engine("sglang")
SGLANG = SWA.catalogue.resolve("sglang.swa")
UPSTREAM = "sglang.srt.mem_cache.allocator.swa:SWATokenToKVPoolAllocator"


def __getattr__(name):  # by import path: tests.swa.test_upstream:Undeclared
    if name == "Undeclared":
        return undeclared(UPSTREAM)
    raise AttributeError(name)


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(2))
def test_every_seeded_trace_runs_to_its_last_op_on_upstream(shard):
    assert SWA.catalogue.resolve(RELEASED) is SGLANG
    assert_seeded_traces_agree("swa", SGLANG, range(shard * 250, (shard + 1) * 250))


def test_an_unchecked_decode_short_on_one_pool_loses_a_page_when_undeclared():
    # Two full pages, one SWA page: the decode opens a page, which only the full pool has.
    trace = Trace(4, 8, 4, False, (Admit(1), Extend((1,), (4,)), Decode((), checked=False)))
    assert SWA.check(trace, SGLANG).status == OUTSIDE_CONTRACT
    found = divergence("swa", trace, SWA.catalogue.resolve(f"{__name__}:Undeclared"))
    assert found is not None and found.what.startswith("full_available_size"), \
        found and found.report()
    report = found.report()
    assert "full_available_size: expected 4, actual 0" in report.replace("  ", " ") or \
        "expected 4, actual 0" in report, report
    assert "full pool: 1 pages neither free, staged, pending nor held (lost)" in report, report


def test_the_corpus_replays_clean_on_upstream():
    assert assert_corpus_replays_clean("swa", SGLANG, outside_allowed=True) >= 5
