"""The end-of-run summary of `kvfuzz diff`: a row of outcomes per implementation (`table`, shared
by every target), and for extend/decode what each did outside the contract and the edge classes."""

from __future__ import annotations

from collections import defaultdict

from kvfuzz.fuzz.diff_campaign import rate_text
from kvfuzz.strategies.paged.edges import CLASSES


def summary(target: str, tallies: dict, elapsed: float, interrupted: bool = False) -> str:
    lines = table(target, tallies, interrupted, extra=[("outside", lambda t: t.outside_cases)])
    lines += _outside_lines(tallies)
    lines += _edge_lines(target, tallies)
    lines.append(f"  wall time {elapsed:.1f} s")
    return "\n".join(lines)


def table(title: str, tallies: dict, interrupted: bool, unit: str = "cases", extra=(),
          notes=lambda tally: ()) -> list[str]:
    """Title, then per implementation: runs, agree, the `extra` columns (heading, tally -> int),
    diverged, runs per second; `notes(tally)` gives lines to print under its row."""
    width = max([34] + [len(name) + 2 for name in tallies])
    widths = [max(9, len(heading) + 2) for heading, _ in extra]
    lines = [f"summary: {title}" + ("  (interrupted: counts so far)" if interrupted else ""),
             f"  {'implementation':<{width}}{unit:>8}{'agree':>8}"
             + "".join(f"{heading:>{w}}" for (heading, _), w in zip(extra, widths))
             + f"{'diverged':>10}{unit + '/s':>10}"]
    for name, tally in tallies.items():
        lines.append(f"  {name:<{width}}{tally.cases:>8,}{tally.agree:>8,}"
                     + "".join(f"{column(tally):>{w},}" for (_, column), w in zip(extra, widths))
                     + f"{'yes' if tally.divergence else 'no':>10}"
                     + f"{rate_text(tally.cases, tally.seconds):>10}")
        lines += [f"    {note}" for note in notes(tally)]
    return lines


def grid(cells: list[str], per_row: int = 4) -> list[str]:
    return ["    " + " | ".join(cells[i:i + per_row]) for i in range(0, len(cells), per_row)]


def counts(heading: str, tallies: dict, name: str) -> list[str]:
    """The counter `name` of the fullest tally as `key count` cells, in key order."""
    if not tallies:
        return []
    counter = getattr(fullest(tallies), name)
    return [f"  {heading}:"] + grid([f"{key} {count:,}" for key, count in sorted(counter.items())])


def fullest(tallies: dict):
    """Every implementation sees the same cases; the longest run has the fullest counts."""
    return max(tallies.values(), key=lambda tally: tally.cases)


def _outside_lines(tallies: dict) -> list[str]:
    by_kind = defaultdict(list)
    for name, tally in tallies.items():
        for (kind, behaviour), count in sorted(tally.outside.items()):
            by_kind[kind].append(f"{name} {behaviour} x{count}")
    if not by_kind:
        return []
    lines = ["  outside the contract (recorded, not compared):"]
    lines += [f"    {kind}: " + "; ".join(entries) for kind, entries in sorted(by_kind.items())]
    return lines


def _edge_lines(target: str, tallies: dict) -> list[str]:
    if not tallies:
        return []
    edges = fullest(tallies).edges
    classes = CLASSES.get(target, ())
    missing = [name for name in classes if not edges[name]]
    lines = [f"  edge classes hit ({len(classes) - len(missing)}/{len(classes)}):"]
    lines += grid([f"{name} {edges[name]:,}" for name in classes])
    if missing:
        lines.append(f"  NEVER HIT: {', '.join(missing)}")
    return lines
