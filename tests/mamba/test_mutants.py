"""Each broken Mamba slot allocator (ours and upstream's source with one edit) is caught by the
seeded lock step with a readable, shrunk report that names the op, the field or invariant, and
the replay command; what the mutant was made from agrees on the shrunk trace."""

from tests.helpers import mutant_tests

EXPECTED = {
    "mutant.mamba.group_end_leaks": r"neither free, pre-allocated nor held \(lost\)",
    "mutant.mamba.exact_fit_refused": r"None vs success",
    "mutant.mamba.free_keeps_view": r"ownership +slot -99",
    "mutant.sglang.mamba.free_prepends": r"free list +first difference",
    "mutant.sglang.mamba.group_end_drops_unused": r"\(lost\)",
    "mutant.sglang.mamba.reserved_slot_handed_out": r"slot 0",
    "mutant.sglang.mamba.group_serves_any_size": r"result +first difference",
    "mutant.sglang.mamba.exact_fit_refused": r"available_size|None vs success",
    "mutant.sglang.mamba.schedulable_counts_nothing": r"schedulable_available_size: expected 39, actual 0",
}


test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("mamba", EXPECTED,
                 lambda name: "sglang.mamba" if ".sglang." in name else "mamba.torch")
