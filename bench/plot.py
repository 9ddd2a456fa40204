"""PNG of speedup over the per-request loop vs batch size: one panel per page size, one line per
extend-length band (solid: ours, dashed: the upstream formulation)."""

from __future__ import annotations

from pathlib import Path


def speedup_plot(target: str, rows, out_dir) -> Path | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # no display on CI
    import matplotlib.pyplot as plt

    page_sizes = sorted({r.page_size for r in rows})
    figure, axes = plt.subplots(1, len(page_sizes), figsize=(4 * len(page_sizes), 3.6),
                                sharey=True, squeeze=False)
    for axis, page_size in zip(axes[0], page_sizes):
        for index, band in enumerate(dict.fromkeys(r.band for r in rows)):
            line = sorted((r for r in rows if r.band == band and r.page_size == page_size),
                          key=lambda r: r.batch_size)
            sizes = [r.batch_size for r in line]
            color = f"C{index}"
            axis.plot(sizes, [r.speedup("torch.vectorized") for r in line], "o-", color=color,
                      label=f"ours, {band}")
            axis.plot(sizes, [r.speedup("torch.three_phase") for r in line], "x--", color=color,
                      label=f"upstream, {band}")
        axis.axhline(1.0, color="grey", linewidth=0.8)
        axis.set(xscale="log", yscale="log", title=f"{target}, page size {page_size}",
                 xlabel="batch size")
    axes[0][0].set_ylabel("speedup over per-request loop")
    axes[0][-1].legend(fontsize=7)
    figure.tight_layout()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{target}_speedup.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
