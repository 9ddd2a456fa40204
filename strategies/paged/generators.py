"""Seeded plain-random case generators (no Hypothesis): case `index` of `seed` is the same forever.

Each generator is named with a version; a change to what it produces must bump the version, and
`tests/test_repository.py` pins a few outputs so an accidental change fails.
"""

from __future__ import annotations

import random
from typing import Sequence

from kvfuzz.strategies.paged.build import FAULTS, break_contract, build_decode, build_extend
from kvfuzz.strategies.inputs import Origin
from kvfuzz.strategies.paged.case import Case
from kvfuzz.strategies.sources import seeded_random

GENERATORS = {"extend": "extend/1", "decode": "decode/1"}
FAULT_RATE = 0.04  # share of generated cases pushed outside the contract on purpose


class RandomChooser:
    """The `Chooser` protocol over `random.Random`."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def choice(self, options: Sequence):
        return options[self.rng.randrange(len(options))]

    def distinct(self, low: int, high: int, count: int) -> list[int]:
        return self.rng.sample(range(low, high + 1), count)

    def shuffled(self, values: list[int]) -> list[int]:
        values = list(values)
        self.rng.shuffle(values)
        return values


def generate(target: str, seed: int, index: int) -> Case:
    """Case `index` of `seed` for `target` ("extend" or "decode")."""
    generator = GENERATORS[target]
    rng = seeded_random(generator, seed, index)
    chooser = RandomChooser(rng)
    origin = Origin(generator, seed, index)
    build = build_extend if target == "extend" else build_decode
    case = build(chooser, origin)
    if rng.random() < FAULT_RATE:
        case = break_contract(chooser, case, chooser.choice(FAULTS))
    return case
