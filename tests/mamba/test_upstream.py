"""The released upstream MambaSlotAllocator (sglang 0.5.23) through the same lock step: every
trace of its own profile runs to its last op; what it declares its callers never do (a nested
alloc group, a clear inside one) is outside its contract, and undeclared, kvfuzz reports what it
then does: a nested begin leaks the first group's slots, a clear hands out a free slot."""

import functools

import pytest

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.mamba.target import MAMBA
from kvfuzz.fuzz.engine.target import AGREE, OUTSIDE_CONTRACT
from kvfuzz.impl.mamba import RELEASED
from kvfuzz.strategies.mamba.trace import Admit, Clear, GroupBegin, GroupEnd, Trace
from tests.conftest import CORPUS
from kvfuzz.impl.registry import load_attribute
from tests.helpers import divergence, fail_with, needs_engine

pytestmark = needs_engine("sglang")
SGLANG = MAMBA.catalogue.resolve("sglang.mamba")


@functools.cache
def doubles() -> dict:
    """Test doubles of the released class, built on first use (never at collection)."""
    MambaSlotAllocator = load_attribute("sglang.srt.mem_cache.allocator.mamba:MambaSlotAllocator")

    class Undeclared(MambaSlotAllocator):
        """The released class under another name: no catalogue entry, so no declared
        preconditions."""
    return {"Undeclared": Undeclared}


def __getattr__(name):  # the doubles by import path: tests.mamba.test_upstream:Undeclared
    if name in ("Undeclared",):
        return doubles()[name]
    raise AttributeError(name)


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(2))
def test_every_seeded_trace_runs_to_its_last_op_on_upstream(shard):
    assert MAMBA.catalogue.resolve(RELEASED) is SGLANG
    for index in range(shard * 250, (shard + 1) * 250):
        outcome = MAMBA.check(MAMBA.generator.generate(0, index, [SGLANG]), SGLANG)
        if outcome.status != AGREE:
            assert outcome.divergence is not None, outcome.outside
            fail_with(outcome.divergence)


@pytest.mark.parametrize("ops, label, shows", [
    ((GroupBegin(2), GroupBegin(1), GroupEnd()), "available_size", "lost"),
    ((GroupBegin(2), Clear(), Admit(1), Admit(2)), "available_size", "slot 1 held by r1"),
])
def test_undeclared_group_misuse_is_reported(ops, label, shows):
    trace = Trace(4, ops)
    assert MAMBA.check(trace, SGLANG).status == OUTSIDE_CONTRACT
    undeclared = MAMBA.catalogue.declared(MAMBA.catalogue.resolve(f"{__name__}:Undeclared"),
                                doubles()["Undeclared"])
    found = divergence("mamba", trace, undeclared)
    assert found is not None and found.what.startswith(label), found and found.report()
    assert shows in found.report(), found.report()


def test_the_corpus_replays_clean_on_upstream():
    files = [path for path in corpus.input_files([CORPUS]) if path.name.startswith("mamba-")]
    agreed = 0
    for path in files:
        _, trace = corpus.load(path)
        outcome = MAMBA.check(trace, SGLANG)
        if outcome.status not in (AGREE, OUTSIDE_CONTRACT):
            outcome.divergence.saved_path = str(path)
            fail_with(outcome.divergence, save=False)
        agreed += outcome.status == AGREE
    assert agreed >= 3
