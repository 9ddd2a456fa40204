"""Each broken Mamba slot allocator (ours and upstream's source with one edit) is caught by the
seeded lock step with a readable, shrunk report that names the op, the field or invariant, and
the replay command; what the mutant was made from agrees on the shrunk trace."""

import re

import pytest

from kvfuzz.fuzz.mamba.target import MAMBA
from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.fuzz.engine.target import AGREE
from tests.helpers import loads
from tests.helpers import dumps
from tests.helpers import by_tier, divergence, mutants

EXPECTED = {
    "mutant.mamba.group_end_leaks": r"neither free, pre-allocated nor held \(lost\)",
    "mutant.mamba.exact_fit_refused": r"None vs success",
    "mutant.mamba.free_keeps_view": r"ownership +slot -99",
    "mutant.sglang.mamba.free_prepends": r"free list +first difference",
    "mutant.sglang.mamba.group_end_drops_unused": r"\(lost\)",
    "mutant.sglang.mamba.reserved_slot_handed_out": r"slot 0",
    "mutant.sglang.mamba.group_serves_any_size": r"result +first difference",
    "mutant.sglang.mamba.exact_fit_refused": r"available_size|None vs success",
}


def test_every_mutant_has_an_expectation():
    assert sorted(EXPECTED) == sorted(m.name for m in mutants("mamba"))


@pytest.mark.parametrize("name", by_tier(sorted(EXPECTED)))
def test_mutant_is_caught_with_a_readable_shrunk_report(name):
    impl = MAMBA.catalogue.resolve(name)
    if not impl.available():
        pytest.skip("needs upstream sglang installed (see docs/upstream-sglang.md)")
    found = next((d for d in (divergence("mamba", MAMBA.generator.generate(0, i, [impl]), impl)
                              for i in range(60)) if d is not None), None)
    assert found is not None, f"{name}: no divergence in 60 seeded traces"
    small = shrink(MAMBA, found, budget=(3000, 10.0))
    report = small.report()
    assert report.startswith(f"DIVERGENCE  mamba  implementation {name}")
    assert " at op " in report and "\n  call      " in report
    assert f"kvfuzz replay corpus/mamba-{small.input.trace_id()}.json --impl {name}" in report
    assert re.search(r"shrunk from generator mamba/1(\[[^]]+\])?, seed 0", report), report
    assert re.search(EXPECTED[name], report), report
    again = divergence("mamba", loads(dumps(small.input)), name)
    assert again is not None and again.signature == small.signature
    original = "sglang.mamba" if ".sglang." in name else "mamba.torch"
    assert MAMBA.check(small.input, MAMBA.catalogue.resolve(original)).status == AGREE
