"""Tables and the survival plot of `kvfuzz bench detection`: per target, a row per mutant and a
column per strategy, each cell the median inputs and seconds to detection over the trials that
found it and how many did; a last row counts the mutants each strategy found and gives the
geometric mean of their median seconds."""

from __future__ import annotations

import math
import statistics
from pathlib import Path


def tables(results, strategies, trials: int) -> str:
    out = []
    for target in dict.fromkeys(r.target for r in results):
        rows = [r for r in results if r.target == target]
        mutants = list(dict.fromkeys(r.mutant for r in rows))
        out += [f"\n#### {target}\n", "| mutant | " + " | ".join(strategies) + " |",
                "|---|" + "---:|" * len(strategies)]
        medians = {s: [] for s in strategies}
        found_all = {s: 0 for s in strategies}
        for mutant in mutants:
            cells = []
            for strategy in strategies:
                hits = [r for r in rows if r.mutant == mutant and r.strategy == strategy and r.found]
                if hits:
                    seconds = statistics.median(r.seconds for r in hits)
                    medians[strategy].append(seconds)
                    found_all[strategy] += len(hits) == trials
                    cells.append(f"{statistics.median(r.cases for r in hits):,.0f} / "
                                 f"{seconds:.2f} s ({len(hits)}/{trials})")
                else:
                    cells.append(f"not found (0/{trials})")
            out.append(f"| {mutant} | " + " | ".join(cells) + " |")
        out.append("| **found in every trial; geo-mean s** | " + " | ".join(
            f"**{found_all[s]}/{len(mutants)}**; {_geo_mean(medians[s])}" for s in strategies)
            + " |")
    return "\n".join(out)


def _geo_mean(values) -> str:
    if not values:
        return "-"
    return f"{math.exp(statistics.fmean(math.log(max(v, 1e-3)) for v in values)):.2f} s"


def survival_plot(results, strategies, out_dir) -> Path | None:
    """Fraction of (mutant, trial) pairs found against time, one line per strategy."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # no display on CI
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.2))
    for strategy in strategies:
        runs = [r for r in results if r.strategy == strategy]
        times = sorted(max(r.seconds, 1e-3) for r in runs if r.found)
        if not runs:
            continue
        axis.step([1e-3] + times, [0] + [(i + 1) / len(runs) for i in range(len(times))],
                  where="post", label=f"{strategy} ({len(times)}/{len(runs)})")
    axis.set(xscale="log", xlabel="seconds to detection (log)", ylim=(0, 1.02),
             ylabel="fraction of (mutant, trial) pairs found",
             title="kvfuzz bench detection: mutants found against time")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "detection_survival.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
