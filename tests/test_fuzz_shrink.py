"""The shrinker keeps the divergence signature and makes a mutant's failing case small."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine import DIVERGE, check
from kvfuzz.fuzz.shrink import same_divergence, shrink
from kvfuzz.impl.registry import resolve
from kvfuzz.strategies.paged.generators import generate

MUTANTS = (("extend", "mutant.owner_left_bisect"), ("extend", "mutant.inclusive_page_start"),
           ("decode", "mutant.inclusive_rank"), ("decode", "mutant.opens_page_off_by_one"))


def _first_divergence(impl, fn, target: str):
    for index in range(2000):
        outcome = check(impl, fn, generate(target, 11, index))
        if outcome.status == DIVERGE and outcome.case.batch_size >= 4:
            return outcome
    raise AssertionError(f"{impl.name}: no divergence in 2000 seeded cases")


@pytest.mark.parametrize("target, name", MUTANTS)
def test_shrunk_case_fails_the_same_way_and_is_small(target, name):
    impl = resolve(target, name)
    fn = impl.load()
    outcome = _first_divergence(impl, fn, target)
    small = shrink(outcome.case, same_divergence(impl, fn, outcome.divergence))
    again = check(impl, fn, small)
    assert again.status == DIVERGE
    assert again.divergence.signature() == outcome.divergence.signature()
    assert small.batch_size <= 3 < outcome.case.batch_size + 1
    assert len(small.free_pages) <= 3
    assert max(small.free_pages, default=0) <= 8


def test_nothing_smaller_fails_gives_the_case_back():
    case = generate("extend", 0, 5)
    assert shrink(case, lambda candidate: candidate == case) == case


def test_a_bundled_implementation_never_shrinks_into_a_false_failure():
    impl = resolve("extend", "torch.vectorized")
    fn = impl.load()
    case = generate("extend", 0, 1)
    calls = []

    def still_fails(candidate):
        calls.append(candidate)
        return check(impl, fn, candidate).status == DIVERGE

    assert shrink(case, still_fails) == case
    assert calls  # candidates were tried, none failed
