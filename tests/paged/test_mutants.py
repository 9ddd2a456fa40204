"""The kill matrix: every deliberately broken implementation is caught by the seeded diff and
by the hypothesis property, with a report a person can act on."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.fuzz.engine.run import run_chunk
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.targets import EXTEND
from kvfuzz.impl.paged.calling import call
from kvfuzz.impl.registry import OURS, Implementation
from kvfuzz.strategies.paged.case import Case
from tests.helpers import mutants, run_property
from tests.paged.test_properties import STRATEGIES, agreement_property

# What each mutant's report must say: the kind of divergence, and (for wrong slots) a phase.
EXPECTED_KIND = {
    "mutant.no_empty_pool_guard": ("raised", "IndexError"),
    "mutant.no_clamp": ("raised", "IndexError"),
    "mutant.owner_left_bisect": ("wrong slot", "phase"),
    "mutant.inclusive_page_start": ("wrong slot", "phase"),
    "mutant.inclusive_rank": ("wrong slot", "phase"),
    "mutant.opens_page_off_by_one": ("wrong slot", "phase"),
}
# The torch mutants; the Triton kernel mutants have their own tests (test_triton.py).
ALL_MUTANTS = [(t, m) for t in ("extend", "decode") for m in mutants(t)
               if m.path.startswith("kvfuzz.impl.paged.mutants:")]


def test_every_mutant_has_an_expected_report():
    assert {m.name for _, m in ALL_MUTANTS} == set(EXPECTED_KIND)


@pytest.mark.parametrize("target, mutant", ALL_MUTANTS, ids=lambda x: getattr(x, "name", x))
def test_seeded_diff_catches_mutant_with_readable_report(target, mutant, tmp_path):
    tally = run_chunk(target, mutant.name, 0, 0, 2000, "cpu")
    assert tally.divergence is not None, f"{mutant.name} survived 2,000 seeded cases"
    kind, word = EXPECTED_KIND[mutant.name]
    report = tally.divergence.report()
    assert f"what      {kind}" in report and word in report, report
    assert "generator" in report and "seed 0" in report
    assert f"--impl {mutant.name}" in report


@pytest.mark.parametrize("target, mutant", ALL_MUTANTS, ids=lambda x: getattr(x, "name", x))
def test_property_catches_mutant(target, mutant):
    prop, _ = agreement_property(mutant, STRATEGIES[target])
    # Detection is the claim here; shrinking an IndexError through torch takes minutes. The
    # same examples in every profile: a random draw of 150 missed `no_clamp` now and then.
    quick = settings(phases=(Phase.explicit, Phase.reuse, Phase.generate), database=None,
                     derandomize=True)
    with pytest.raises(Mismatch) as caught:
        run_property(quick(prop), save=False)
    assert "DIVERGENCE" in str(caught.value)


def _impl(name: str) -> Implementation:
    return Implementation(name, "extend", f"{__name__}:{name}", "test double", OURS)


def leaves_last_slot(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    from kvfuzz.impl.paged.vectorized import alloc_extend
    alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices[:-1], page_size, device)


def clobbers_prefix_lens(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size,
                         device):
    """Right output, but it reuses an input tensor as scratch space afterwards."""
    from kvfuzz.impl.paged.vectorized import alloc_extend
    alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)
    prefix_lens.zero_()


def test_unwritten_slot_is_reported_as_not_written():
    case = Case("extend", 4, (11,), (1,), (1, 2, 3), prefix_lens=(2,))
    outcome = EXTEND.check(case, _impl("leaves_last_slot"))
    assert outcome.status == DIVERGE and outcome.divergence.signature[2] == "not written"
    assert "(not written)" in outcome.divergence.report()


def test_mutated_input_is_a_divergence():
    case = Case("extend", 4, (11,), (1,), (3, 2, 1), prefix_lens=(2,))
    assert call(clobbers_prefix_lens, case).mutated_inputs == ("prefix_lens",)
    outcome = EXTEND.check(case, _impl("clobbers_prefix_lens"))
    assert outcome.status == DIVERGE and outcome.divergence.signature[2] == "mutated input"
    assert "prefix_lens" in outcome.divergence.report()
