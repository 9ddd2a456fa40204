"""The history table as a heat map (PNG): one panel per package, a class per row, a release per
column, each cell coloured by its verdict. Drawn only where matplotlib is installed (it is not
one of kvfuzz's dependencies), the way `kvfuzz bench` draws its figures (`bench/plot.py`)."""

from __future__ import annotations

from pathlib import Path

from kvfuzz.fuzz.history.cells import AGREE, CRASHED, DIVERGES, ERROR, UNSUPPORTED
from kvfuzz.fuzz.history.table import grid

# Verdict -> (value in the colour map, label, colour).
SCALE = [(AGREE, "agree", "#4caf50"), (DIVERGES, "diverges", "#ff9800"),
         (CRASHED, "crashed", "#d32f2f"), (UNSUPPORTED, "not supported", "#9e9e9e"),
         (ERROR, "error", "#212121"), (None, "not run", "#ffffff")]
VALUE = {status: number for number, (status, _, _) in enumerate(SCALE)}


def matrices(cells, records: dict) -> dict:
    """{package: (releases, classes, rows of verdict values)}: what the picture shows."""
    out = {}
    for package, (releases, classes, table) in grid(cells, records).items():
        rows = [[VALUE[(table.get((name, v)) or {}).get("status")] for v in releases]
                for name in classes]
        out[package] = (releases, classes, rows)
    return out


def draw(cells, records: dict, path: Path) -> Path | None:
    """The PNG at `path`, or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # no display on CI
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    panels = matrices(cells, records)
    colours = ListedColormap([colour for _, _, colour in SCALE])
    heights = [len(classes) + 1.5 for _, classes, _ in panels.values()]
    width = max(len(releases) for releases, _, _ in panels.values())
    figure, axes = plt.subplots(len(panels), 1, squeeze=False,
                                figsize=(max(6.5, 3.5 + 0.7 * width), 0.45 * sum(heights) + 1.3),
                                gridspec_kw={"height_ratios": heights})
    for axis, (package, (releases, classes, rows)) in zip(axes[:, 0], panels.items()):
        axis.imshow(rows, cmap=colours, vmin=-0.5, vmax=len(SCALE) - 0.5, aspect="auto")
        axis.set_xticks(range(len(releases)), releases, rotation=45, ha="right", fontsize=8)
        axis.set_yticks(range(len(classes)), classes, fontsize=8)
        axis.set_xticks([x - 0.5 for x in range(1, len(releases))], minor=True)
        axis.set_yticks([y - 0.5 for y in range(1, len(classes))], minor=True)
        axis.grid(which="minor", color="white", linewidth=1.5)
        axis.tick_params(which="minor", length=0)
        axis.set_title(package, fontsize=10)
    figure.legend(handles=[Patch(color=colour, label=label) for _, label, colour in SCALE],
                  loc="lower center", ncol=3, fontsize=8, frameon=False)
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
