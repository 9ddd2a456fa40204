"""Hypothesis strategies over the same builders as the seeded generators."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from kvfuzz.strategies.paged.build import FAULTS, break_contract, build_decode, build_extend


class DrawChooser:
    """The `Chooser` protocol over a Hypothesis `draw`, so shrinking works choice by choice."""

    def __init__(self, draw):
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))

    def choice(self, options):
        return self.draw(st.sampled_from(options))

    # Long unique lists and permutations are slow to generate and shrink in Hypothesis; past a
    # few elements, one drawn seed picks them instead (shrinking then still shortens the batch).
    SMALL = 8

    def distinct(self, low: int, high: int, count: int) -> list[int]:
        if count <= self.SMALL:
            return self.draw(st.lists(st.integers(low, high), min_size=count, max_size=count,
                                      unique=True))
        return self._rng().sample(range(low, high + 1), count)

    def shuffled(self, values: list[int]) -> list[int]:
        if len(values) <= self.SMALL:
            return self.draw(st.permutations(values))
        values = list(values)
        self._rng().shuffle(values)
        return values

    def _rng(self) -> random.Random:
        return random.Random(self.draw(st.integers(0, 2**32 - 1)))


@st.composite
def extend_cases(draw):
    return build_extend(DrawChooser(draw))


@st.composite
def decode_cases(draw):
    return build_decode(DrawChooser(draw))


@st.composite
def cases_outside_contract(draw, target: str = "extend"):
    chooser = DrawChooser(draw)
    case = (build_extend if target == "extend" else build_decode)(chooser)
    return break_contract(chooser, case, chooser.choice(FAULTS))
