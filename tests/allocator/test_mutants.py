"""Each broken allocator is caught by the seeded stateful differential with a readable, shrunk
report that names the op, the field or invariant, and the replay command."""

import re

import pytest

from kvfuzz.fuzz.allocator.target import ALLOCATOR
from kvfuzz.fuzz.shrink import shrink
from kvfuzz.strategies.allocator.codec import loads
from kvfuzz.strategies.allocator.generator import generate
from kvfuzz.strategies.allocator.trace import dumps
from tests.helpers import divergence, mutants

# What each report must say: the field or invariant that exposes the fault.
EXPECTED = {
    "mutant.allocator.free_no_dedup": r"pages twice on the (free list|staged) \(double free\)",
    "mutant.allocator.lost_at_merge": r"neither free, staged, pending nor held \(lost\)",
    "mutant.allocator.failed_alloc_advances": r"neither free, staged, pending nor held \(lost\)",
    "mutant.allocator.padding_page": r"page 0 \(the padding page\)",
}


def first_divergence(name: str, limit: int = 60):
    for index in range(limit):
        found = divergence("allocator", generate(0, index), name)
        if found is not None:
            return found
    pytest.fail(f"{name}: no divergence in {limit} seeded traces")


def test_every_mutant_has_an_expectation():
    assert sorted(EXPECTED) == sorted(m.name for m in mutants("allocator"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_mutant_is_caught_with_a_readable_shrunk_report(name):
    found = first_divergence(name)
    small = shrink(ALLOCATOR, found, budget=(3000, 10.0))
    report = small.report()
    assert report.startswith(f"DIVERGENCE  allocator  implementation {name}")
    assert " at op " in report and "\n  call      " in report
    assert f"kvfuzz replay corpus/allocator-{small.input.trace_id()}.json --impl {name}" in report
    assert "shrunk from generator allocator/1, seed 0" in report
    assert re.search(EXPECTED[name], report), report
    assert len(small.input.ops) <= len(found.input.ops)
    # The shrunk trace round-trips through JSON and still fails the same way, and the bundled
    # allocator agrees with the oracle on it.
    again = divergence("allocator", loads(dumps(small.input)), name)
    assert again is not None and again.signature == small.signature
    assert divergence("allocator", small.input, "allocator.torch") is None
