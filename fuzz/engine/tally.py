"""One implementation's counts over a seeded run, merged chunk by chunk from the workers."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kvfuzz.fuzz.engine.target import AGREE, DIVERGE, OUTSIDE_CONTRACT, Outcome


@dataclass
class Tally:
    cases: int = 0
    agree: int = 0
    outside: int = 0
    outside_kinds: Counter = field(default_factory=Counter)  # (violation, behaviour) -> inputs
    features: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    divergence: object = None   # the first divergence
    at: int = -1                # its input index

    def add(self, outcome: Outcome, index: int) -> None:
        self.cases += 1
        self.features.update(outcome.features)
        if outcome.status == AGREE:
            self.agree += 1
        elif outcome.status == OUTSIDE_CONTRACT:
            self.outside += 1
            self.outside_kinds.update((kind, outcome.behaviour) for kind in set(outcome.outside))
        elif outcome.status == DIVERGE and self.divergence is None:
            self.divergence, self.at = outcome.divergence, index

    def merge(self, other: "Tally") -> None:
        self.cases += other.cases
        self.agree += other.agree
        self.outside += other.outside
        self.seconds += other.seconds
        self.outside_kinds.update(other.outside_kinds)
        self.features.update(other.features)
        # Chunks finish in any order: report the lowest index, whichever worker found it.
        if other.divergence is not None and (self.divergence is None or other.at < self.at):
            self.divergence, self.at = other.divergence, other.at
