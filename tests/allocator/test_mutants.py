"""Each broken allocator is caught by the seeded stateful differential with a readable, shrunk
report that names the op, the field or invariant, and the replay command."""

import re

import pytest

from kvfuzz.fuzz.allocator.target import ALLOCATOR
from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.fuzz.engine.target import AGREE
from tests.helpers import loads
from tests.helpers import dumps
from tests.helpers import by_tier, divergence, mutants

# What each report must say: the field or invariant that exposes the fault.
EXPECTED = {
    "mutant.allocator.free_no_dedup": r"pages twice on the (free list|staged) \(double free\)",
    "mutant.allocator.lost_at_merge": r"neither free, staged, pending nor held \(lost\)",
    "mutant.allocator.failed_alloc_advances": r"neither free, staged, pending nor held \(lost\)",
    "mutant.allocator.padding_page": r"page 0 \(the padding page\)",
    "mutant.allocator.group_keeps_view": r"ownership +page -99",
    "mutant.allocator.nested_group_restarts": r"rejection +expected the call to be rejected",
    # Upstream's own source, one edit each (impl/allocator/upstream_mutants.py).
    "mutant.sglang.token.free_prepends": r"free list +first difference",
    "mutant.sglang.token.group_keeps_view": r"ownership +page -99",
    "mutant.sglang.token.alloc_never_merges": r"None vs success",
    "mutant.sglang.paged.group_keeps_view": r"ownership +page -99",
    "mutant.sglang.paged.merge_drops_staged": r"None vs success",
    "mutant.sglang.paged.extend_skips_exact_check": r"None vs success",
    "mutant.sglang.paged.clear_keeps_group": r"available_size",
}
# What the mutant was made from: it agrees with the oracle on the shrunk trace.
ORIGINAL = {"mutant.sglang.token": "sglang.token", "mutant.sglang.paged": "sglang.paged"}


def first_divergence(name: str, limit: int = 60):
    impl = ALLOCATOR.catalogue.resolve(name)
    for index in range(limit):
        found = divergence("allocator", ALLOCATOR.generator.generate(0, index, [impl]), impl)
        if found is not None:
            return found
    pytest.fail(f"{name}: no divergence in {limit} seeded traces")


def test_every_mutant_has_an_expectation():
    assert sorted(EXPECTED) == sorted(m.name for m in mutants("allocator"))


@pytest.mark.parametrize("name", by_tier(sorted(EXPECTED)))
def test_mutant_is_caught_with_a_readable_shrunk_report(name):
    if not ALLOCATOR.catalogue.resolve(name).available():
        pytest.skip("needs upstream sglang installed (see docs/upstream-sglang.md)")
    found = first_divergence(name)
    small = shrink(ALLOCATOR, found, budget=(3000, 10.0))
    report = small.report()
    assert report.startswith(f"DIVERGENCE  allocator  implementation {name}")
    assert " at op " in report and "\n  call      " in report
    assert f"kvfuzz replay corpus/allocator-{small.input.trace_id()}.json --impl {name}" in report
    assert re.search(r"shrunk from generator allocator/2(\[[^]]+\])?, seed 0", report), report
    assert re.search(EXPECTED[name], report), report
    assert len(small.input.ops) <= len(found.input.ops)
    # The shrunk trace round-trips through JSON and still fails the same way, and what the
    # mutant was made from agrees with the oracle on it (it is run, not left outside).
    again = divergence("allocator", loads(dumps(small.input)), name)
    assert again is not None and again.signature == small.signature
    original = ORIGINAL.get(name.rsplit(".", 1)[0], "allocator.torch")
    assert ALLOCATOR.check(small.input, ALLOCATOR.catalogue.resolve(original)).status == AGREE
