"""The end-of-run summary of `kvfuzz diff`: outcomes per implementation, what each did with
cases outside the contract, and how often every edge class was hit."""

from __future__ import annotations

from collections import defaultdict

from strategies.edges import CLASSES


def summary(target: str, tallies: dict, elapsed: float, interrupted: bool = False) -> str:
    lines = [f"summary: {target}" + ("  (interrupted: counts so far)" if interrupted else "")]
    lines.append(f"  {'implementation':<34}{'cases':>8}{'agree':>8}{'outside':>9}"
                 f"{'diverged':>10}{'cases/s':>10}")
    for name, tally in tallies.items():
        outside = tally.outside_cases
        rate = tally.cases / tally.seconds if tally.seconds else 0.0
        verdict = "yes" if tally.divergence else "no"
        lines.append(f"  {name:<34}{tally.cases:>8,}{tally.agree:>8,}{outside:>9,}"
                     f"{verdict:>10}{rate:>10,.0f}")
    lines += _outside_lines(tallies)
    lines += _edge_lines(target, tallies)
    lines.append(f"  wall time {elapsed:.1f} s")
    return "\n".join(lines)


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
    # Every implementation sees the same cases; the longest run has the fullest counts.
    edges = max(tallies.values(), key=lambda tally: tally.cases).edges
    classes = CLASSES.get(target, ())
    missing = [name for name in classes if not edges[name]]
    cells = [f"{name} {edges[name]:,}" for name in classes]
    lines = [f"  edge classes hit ({len(classes) - len(missing)}/{len(classes)}):"]
    for start in range(0, len(cells), 4):
        lines.append("    " + " | ".join(cells[start:start + 4]))
    if missing:
        lines.append(f"  NEVER HIT: {', '.join(missing)}")
    return lines
