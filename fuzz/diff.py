"""`kvfuzz diff extend|decode`: seeded cases through implementations and the oracle, run by
`fuzz.diff_campaign`; a divergence is saved to the corpus and reported, the summary counts
outcomes, what happened outside the contract, and edge classes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial

from fuzz import corpus, diff_campaign
from fuzz.engine import AGREE, DIVERGE, Outcome, check
from fuzz.summary import summary
from impl.registry import BUNDLED, implementations, resolve
from strategies.generators import generate


@dataclass
class Tally(diff_campaign.Tally):
    outside_cases: int = 0
    outside: Counter = field(default_factory=Counter)  # (violation kind, behaviour) -> cases
    edges: Counter = field(default_factory=Counter)

    def add(self, outcome: Outcome) -> None:
        self.cases += 1
        self.edges.update(outcome.edges)
        if outcome.status == AGREE:
            self.agree += 1
        elif outcome.status != DIVERGE:
            self.outside_cases += 1
            for violation in {v.kind for v in outcome.violations}:
                self.outside[(violation, outcome.behaviour)] += 1
        elif self.divergence is None:
            self.divergence = outcome.divergence

    def merge(self, other: "Tally") -> None:
        super().merge(other)
        self.outside_cases += other.outside_cases
        self.outside.update(other.outside)
        self.edges.update(other.edges)


def run_chunk(target: str, spec: str, seed: int, start: int, stop: int, device: str) -> Tally:
    """Cases [start, stop) of `seed` against one implementation; stops at the first divergence."""
    impl = resolve(target, spec)
    fn = impl.load()
    return diff_campaign.run_indices(
        Tally(), start, stop, lambda index: check(impl, fn, generate(target, seed, index), device))


def diff_main(args, out=None) -> int:
    """`kvfuzz diff extend|decode`; `args` as the command parses them. Returns the exit status."""
    impls = [resolve(args.target, spec) for spec in args.impl] or \
        implementations(args.target, BUNDLED)
    target = diff_campaign.DiffTarget(args.target, partial(run_chunk, args.target),
                                      partial(summary, args.target), _finish, Tally)
    return diff_campaign.run(target, [impl.name for impl in impls], args, out)


def _finish(tallies: dict, args, out) -> int:
    status = 0
    for tally in tallies.values():
        if tally.divergence is not None:
            status = 1
            tally.divergence.saved_path = str(corpus.save(tally.divergence.case, args.corpus))
            print(tally.divergence.report(), file=out)
    return status
