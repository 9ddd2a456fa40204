"""`kvfuzz diff extend|decode`: seeded cases through implementations and the oracle, run by
`fuzz.diff_campaign`; a divergence is saved to the corpus and reported, the summary counts
outcomes, what happened outside the contract, and edge classes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from functools import partial

from kvfuzz.fuzz import corpus, diff_campaign
from kvfuzz.fuzz.engine import AGREE, DIVERGE, Outcome, check
from kvfuzz.fuzz.shrink import same_divergence, shrink
from kvfuzz.fuzz.summary import summary
from kvfuzz.impl.registry import BUNDLED, implementations, resolve
from kvfuzz.strategies.paged.generators import generate


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
            divergence = shrunk(tally.divergence, args.device)
            divergence.saved_path = str(corpus.save(divergence.case, args.corpus))
            print(divergence.report(), file=out)
    return status


def shrunk(divergence, device: str = "cpu"):
    """The same divergence on the smallest case that still shows it; the report keeps the
    generated case's origin and the command that regenerates it."""
    case, origin = divergence.case, divergence.case.origin
    impl = resolve(case.target, divergence.impl)
    fn = impl.load()
    small = shrink(case, same_divergence(impl, fn, divergence, device))
    if small == case:
        return divergence
    note = f"shrunk from {origin.describe()}" if origin else "shrunk"
    result = check(impl, fn, replace(small, origin=None, note=note), device).divergence
    if origin:
        result.details.append(
            f"original  kvfuzz diff {case.target} --seed {origin.seed} --start {origin.index} "
            f"--cases 1 --impl {divergence.impl}")
    return result
