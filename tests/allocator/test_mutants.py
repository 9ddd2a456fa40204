"""Each broken allocator is caught by the seeded stateful differential with a readable, shrunk
report that names the op, the field or invariant, and the replay command."""

from tests.helpers import mutant_tests

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
    "mutant.sglang.token.offload_never_loads": r"offload +first difference at index 1: .*'load_cpu_copy'",
    "mutant.sglang.paged.group_keeps_view": r"ownership +page -99",
    "mutant.sglang.paged.merge_drops_staged": r"None vs success",
    # Past the exact check, the kernel runs short: it returns slots where None was due, or
    # (an empty pool) the naive kernel's own assert fires.
    "mutant.sglang.paged.extend_skips_exact_check": r"None vs success|crash +AssertionError: "
                                                    r"alloc_extend_naive: free_pages is empty",
    "mutant.sglang.paged.clear_keeps_group": r"available_size",
}
# What the mutant was made from: it agrees with the oracle on the shrunk trace.
ORIGINAL = {"mutant.sglang.token": "sglang.token", "mutant.sglang.paged": "sglang.paged"}


test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("allocator", EXPECTED,
                 lambda name: ORIGINAL.get(name.rsplit(".", 1)[0], "allocator.torch"))
