"""The end-of-run summary of `kvfuzz diff`, for every target: one row of outcomes per
implementation (and the judge's lines under it), what happened outside the contract, and the
judge's lines about what the inputs exercised."""

from __future__ import annotations

from collections import Counter, defaultdict


def summary(target, tallies: dict, elapsed: float, interrupted: bool = False,
            keep_going: bool = False) -> str:
    """With `keep_going`, `diverged` counts the inputs that diverged and `findings` the distinct
    divergence signatures among them (each reported); else `diverged` says yes or no."""
    unit = target.codec.noun + "s"
    width = max([34] + [len(name) + 2 for name in tallies])
    lines = [f"summary: {target.name}" + ("  (interrupted: counts so far)" if interrupted else "")
             + ("  (--keep-going: every distinct divergence)" if keep_going else ""),
             f"  {'implementation':<{width}}{unit:>8}{'agree':>8}{'outside':>9}"
             f"{'diverged':>10}" + (f"{'findings':>10}" if keep_going else "")
             + f"{unit + '/s':>10}"]
    for name, tally in tallies.items():
        diverged = f"{tally.diverged:,}" if keep_going else "yes" if tally.divergence else "no"
        lines.append(f"  {name:<{width}}{tally.cases:>8,}{tally.agree:>8,}{tally.outside:>9,}"
                     f"{diverged:>10}" + (f"{len(tally.findings):>10,}" if keep_going else "")
                     + f"{rate_text(tally.cases, tally.seconds):>10}")
        lines += target.judge.row_lines(tally)
    lines += _outside_lines(tallies)
    if tallies:
        # Each count at its most over the implementations: where they run the same inputs the
        # longest run has the fullest counts, and where each runs a stream of its own (offload:
        # one cache policy each) every stream's edge classes show.
        lines += target.judge.summary_lines(_most(t.features for t in tallies.values()))
    lines.append(f"  wall time {elapsed:.1f} s")
    return "\n".join(lines)


def _most(counters) -> Counter:
    most = Counter()
    for counter in counters:
        most |= counter
    return most


def _outside_lines(tallies: dict) -> list[str]:
    by_kind = defaultdict(list)
    for name, tally in tallies.items():
        for (kind, behaviour), count in sorted(tally.outside_kinds.items()):
            by_kind[kind].append(f"{name} {behaviour} x{count}")
    if not by_kind:
        return []
    lines = ["  outside the contract (recorded, not compared):"]
    lines += [f"    {kind}: " + "; ".join(entries) for kind, entries in sorted(by_kind.items())]
    return lines


def grid(cells: list[str], per_row: int = 4) -> list[str]:
    return ["    " + " | ".join(cells[i:i + per_row]) for i in range(0, len(cells), per_row)]


def counts_grid(heading: str, found: Counter) -> list[str]:
    return [f"  {heading}:"] + grid([f"{key} {count:,}" for key, count in sorted(found.items())])


def rate_text(count: int, seconds: float) -> str:
    rate = count / seconds if seconds > 0 else 0.0
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:,.1f}"
