"""The released upstream MambaSlotAllocator (sglang 0.5.23) through the same lock step: every
trace of its own profile runs to its last op; what it declares its callers never do (a nested
alloc group, a clear inside one) is outside its contract, and undeclared, kvfuzz reports what it
then does: a nested begin leaks the first group's slots, a clear hands out a free slot."""

import pytest

from kvfuzz.fuzz.mamba.target import MAMBA
from kvfuzz.fuzz.engine.target import OUTSIDE_CONTRACT
from kvfuzz.impl.mamba import RELEASED
from kvfuzz.strategies.mamba.trace import Admit, Clear, GroupBegin, GroupEnd, Trace
from tests.helpers import (assert_corpus_replays_clean, assert_seeded_traces_agree, divergence,
                           needs_engine, undeclared)

pytestmark = needs_engine("sglang")
SGLANG = MAMBA.catalogue.resolve("sglang.mamba")
UPSTREAM = "sglang.srt.mem_cache.allocator.mamba:MambaSlotAllocator"


def __getattr__(name):  # by import path: tests.mamba.test_upstream:Undeclared
    if name == "Undeclared":
        return undeclared(UPSTREAM)
    raise AttributeError(name)


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(2))
def test_every_seeded_trace_runs_to_its_last_op_on_upstream(shard):
    assert MAMBA.catalogue.resolve(RELEASED) is SGLANG
    assert_seeded_traces_agree("mamba", SGLANG, range(shard * 250, (shard + 1) * 250))


@pytest.mark.parametrize("ops, label, shows", [
    ((GroupBegin(2), GroupBegin(1), GroupEnd()), "available_size", "lost"),
    ((GroupBegin(2), Clear(), Admit(1), Admit(2)), "available_size", "slot 1 held by r1"),
])
def test_undeclared_group_misuse_is_reported(ops, label, shows):
    trace = Trace(4, ops)
    assert MAMBA.check(trace, SGLANG).status == OUTSIDE_CONTRACT
    found = divergence("mamba", trace, MAMBA.catalogue.resolve(f"{__name__}:Undeclared"))
    assert found is not None and found.what.startswith(label), found and found.report()
    assert shows in found.report(), found.report()


def test_the_corpus_replays_clean_on_upstream():
    assert assert_corpus_replays_clean("mamba", SGLANG, outside_allowed=True) >= 3
