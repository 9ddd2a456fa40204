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
    diverged: int = 0           # inputs that diverged
    outside_kinds: Counter = field(default_factory=Counter)  # (violation, behaviour) -> inputs
    features: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    divergence: object = None   # the first divergence
    at: int = -1                # its input index
    # signature -> (index, divergence): the first input of each distinct divergence (what
    # `--keep-going` reports; `Divergence.signature` says what counts as distinct)
    findings: dict = field(default_factory=dict)

    def add(self, outcome: Outcome, index: int) -> None:
        self.cases += 1
        self.features.update(outcome.features)
        if outcome.status == AGREE:
            self.agree += 1
        elif outcome.status == OUTSIDE_CONTRACT:
            self.outside += 1
            self.outside_kinds.update((kind, outcome.behaviour) for kind in set(outcome.outside))
        elif outcome.status == DIVERGE:
            self.diverged += 1
            self._found(outcome.divergence, index)

    def merge(self, other: "Tally") -> None:
        self.cases += other.cases
        self.agree += other.agree
        self.outside += other.outside
        self.diverged += other.diverged
        self.seconds += other.seconds
        self.outside_kinds.update(other.outside_kinds)
        self.features.update(other.features)
        # Chunks finish in any order: the lowest index of each, whichever worker found it.
        for index, divergence in other.findings.values():
            self._found(divergence, index)
        if other.divergence is not None and (self.divergence is None or other.at < self.at):
            self.divergence, self.at = other.divergence, other.at

    def _found(self, divergence, index: int) -> None:
        known = self.findings.get(divergence.signature)
        if known is None or index < known[0]:
            self.findings[divergence.signature] = (index, divergence)
        if self.divergence is None or index < self.at:
            self.divergence, self.at = divergence, index

    def found(self) -> list:
        """The distinct divergences, in the order of their first inputs."""
        return [divergence for _, divergence in sorted(self.findings.values(),
                                                        key=lambda pair: pair[0])]

    def only_first(self) -> None:
        """Counts of a run that stops at the first divergence: that one is its only finding."""
        self.findings = {} if self.divergence is None else \
            {self.divergence.signature: (self.at, self.divergence)}
        self.diverged = int(self.divergence is not None)
