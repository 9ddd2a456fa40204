"""The shrinker keeps the divergence signature and makes a failing input small, for any target
(a toy target shows the engine alone; the paged mutants show it on real cases)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.engine.shrink import shrink, without_chunks
from kvfuzz.fuzz.engine.target import AGREE, DIVERGE, Outcome, Target
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import Implementation

MUTANTS = (("extend", "mutant.owner_left_bisect"), ("extend", "mutant.inclusive_page_start"),
           ("decode", "mutant.inclusive_rank"), ("decode", "mutant.opens_page_off_by_one"))


def _first_divergence(target, impl):
    for index in range(2000):
        outcome = target.check(target.generator.generate(11, index), impl)
        if outcome.status == DIVERGE and outcome.divergence.input.batch_size >= 4:
            return outcome.divergence
    raise AssertionError(f"{impl.name}: no divergence in 2000 seeded cases")


@pytest.mark.parametrize("target_name, name", MUTANTS)
def test_shrunk_case_fails_the_same_way_and_is_small(target_name, name):
    target = TARGETS[target_name]
    impl = target.catalogue.resolve(name)
    found = _first_divergence(target, impl)
    small = shrink(target, found)
    again = target.check(small.input, impl)
    assert again.status == DIVERGE and again.divergence.signature == found.signature
    assert small.input.batch_size <= 3 < found.input.batch_size + 1
    assert len(small.input.free_pages) <= 3
    assert max(small.input.free_pages, default=0) <= 8
    assert small.input.origin is None and small.input.note.startswith("shrunk from generator")
    assert small.original == (f"kvfuzz diff {target_name} --seed 11 --start "
                              f"{found.input.origin.index} --cases 1 --impl {name}")


@dataclass(frozen=True)
class Numbers:
    """A toy input: it "fails" while it holds every number of `needed`."""

    values: tuple[int, ...]
    origin: object = field(default=None, compare=False)
    note: str = field(default="", compare=False)


class Toy:
    """The codec, judge and shrinker parts of a toy target in one object (each part is a small
    protocol; nothing else of a target is needed to shrink)."""

    format, noun, budget = "toy", "list", (3000, 30.0)

    def __init__(self, needed):
        self.needed, self.calls = set(needed), 0

    def input_id(self, item):
        return ",".join(map(str, item.values))

    def describe(self, item):
        return [("values", str(item.values))]

    def check(self, target, item, impl, device="cpu"):
        self.calls += 1
        if self.needed <= set(item.values):
            return Outcome(DIVERGE, target.divergence(item, impl, "holds them", [], ("kind",)))
        return Outcome(AGREE)

    def candidates(self, item, divergence):
        for values in without_chunks(item.values):
            yield replace(item, values=values)

    def size(self, item):
        return (len(item.values),)

    def size_text(self, item):
        return f"{len(item.values)} values"


def ToyTarget(needed) -> Target:
    toy = Toy(needed)
    catalogue = Catalogue("toy", (Implementation("toy.impl", "toy", "x:y", "toy"),),
                          shape=lambda path, obj: None)
    return Target("toy", toy, None, catalogue, toy, toy)


def _divergence(target, values):
    return target.check(Numbers(tuple(values)), target.catalogue.resolve("toy.impl")).divergence


def test_the_shrinker_finds_the_smallest_failing_input_of_any_target():
    target = ToyTarget({3, 17, 40})
    small = shrink(target, _divergence(target, range(64)))
    assert small.input.values == (3, 17, 40)
    assert small.input.note.startswith("shrunk from list 0,1,2,")
    assert small.input.note.endswith(", 64 values")
    assert target.judge.calls < 200  # one pass per run of cuts, not one per cut


def test_nothing_smaller_fails_gives_the_divergence_back():
    target = ToyTarget({1, 2, 3})
    found = _divergence(target, (1, 2, 3))
    assert shrink(target, found) is found


def test_the_budget_bounds_the_reruns():
    target = ToyTarget({5})
    found = _divergence(target, range(1000))
    target.judge.calls = 0
    shrink(target, found, budget=(7, 60.0))
    assert target.judge.calls <= 7 + 1  # the re-check of the final input


def test_a_bundled_implementation_never_shrinks_into_a_false_failure():
    # A divergence claimed for a correct implementation: no candidate reproduces it.
    target = TARGETS["extend"]
    impl = target.catalogue.resolve("torch.vectorized")
    case = target.generator.generate(0, 1)
    claimed = target.divergence(case, impl, "wrong slot", [], ("wrong slot", "whole pages"))
    assert shrink(target, claimed) is claimed
