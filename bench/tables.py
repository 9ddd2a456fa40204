"""Markdown for the paged benchmarks: the full table, and PR #37938's figures (spec §6.3) beside
what the same comparison measures here."""

from __future__ import annotations

import datetime
import os
import platform

import torch

from kvfuzz.bench.timing import CLOCK_NAME

LOOP, UPSTREAM, OURS = "torch.loop", "torch.three_phase", "torch.vectorized"
# PR #37938, page_size 16, speedup of the vectorized function over the loop (spec §6.3).
PR_P16 = {("1-8", 64): "20.3x", ("1-8", 1024): "109.5x", ("32-64", 64): "24.5x",
          ("32-64", 1024): "47.9x", ("256-512", 64): "5.5x", ("256-512", 1024): "4.9x"}
PR_BS1 = {1: "0.84x-0.94x", 16: "1.09x-1.15x", 64: "1.09x-1.15x", 128: "0.84x-0.94x"}


def header(target: str, quick: bool) -> str:
    today = datetime.date.today().isoformat()
    return (f"\n### kvfuzz bench {target}{' --quick' if quick else ''} ({today})\n\n"
            f"{os.cpu_count()} CPU cores, {torch.get_num_threads()} torch thread(s), "
            f"torch {torch.__version__}, Python {platform.python_version()}: CPU figures, "
            f"not GPU. Median {CLOCK_NAME} per call over repeated runs (torch.utils.benchmark); "
            "x = speedup over the per-request loop; 'ours/up' = upstream formulation time / "
            "ours.\n")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}" if seconds < 1e-2 else f"{seconds * 1e6:,.0f}"


def times(row) -> str:
    return "  ".join(f"{name.split('.')[1]} {_us(s)} us" for name, s in row.seconds.items())


def full_table(target: str, rows) -> str:
    band = "extend len" if target == "extend" else "tokens/req"
    lines = [f"| {band} | bs | P | tokens | loop us | upstream us | ours us | upstream x "
             "| ours x | ours/up |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        s = row.seconds
        lines.append(f"| {row.band} | {row.batch_size} | {row.page_size} | {row.num_tokens} "
                     f"| {_us(s[LOOP])} | {_us(s[UPSTREAM])} | {_us(s[OURS])} "
                     f"| {row.speedup(UPSTREAM):.2f} | {row.speedup(OURS):.2f} "
                     f"| {s[UPSTREAM] / s[OURS]:.2f} |")
    return "\n".join(lines)


def upstream_comparison(rows) -> str:
    """PR #37938's published speedups next to the same ratios measured in this run."""
    found = {(r.band, r.batch_size, r.page_size): r for r in rows}
    lines = ["\nPR #37938 (page size 16; its hardware) vs this run, speedup over the loop:\n",
             "| extend len | bs | PR reported | upstream formulation here | ours here |",
             "|---|---:|---:|---:|---:|"]
    for (band, batch_size), reported in PR_P16.items():
        row = found.get((band, batch_size, 16))
        if row:
            lines.append(f"| {band} | {batch_size} | {reported} | {row.speedup(UPSTREAM):.2f}x "
                         f"| {row.speedup(OURS):.2f}x |")
    lines += ["\nbs = 1 (PR: 'within noise', 40-55 us per call):\n",
              "| P | extend len | PR reported | upstream formulation here | ours here |",
              "|---:|---|---:|---:|---:|"]
    for row in rows:
        if row.batch_size == 1:
            lines.append(f"| {row.page_size} | {row.band} | {PR_BS1[row.page_size]} "
                         f"| {row.speedup(UPSTREAM):.2f}x | {row.speedup(OURS):.2f}x |")
    return "\n".join(lines)


def bandwidth_note(rows, fill_rate: float, copy_rate: float) -> str:
    """How far the largest configuration of each page size is from the floor of just writing
    its output (`fill_rate`: bytes/s of fill_ on a buffer of the largest output's size)."""
    lines = ["\nMemory floor: bytes of output written per second, largest configuration per page "
             f"size. Writing a buffer of the same size with fill_: {fill_rate / 1e9:.2f} GB/s; "
             f"a 256 MB tensor copy: {copy_rate / 1e9:.2f} GB/s (bytes copied).\n",
             "| P | bs | extend len | MB written | ours us | ours GB/s | x write floor "
             "| upstream GB/s |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for page_size in sorted({row.page_size for row in rows}):
        row = max((r for r in rows if r.page_size == page_size), key=lambda r: r.num_tokens)
        written = row.num_tokens * 8
        ours, upstream = written / row.seconds[OURS], written / row.seconds[UPSTREAM]
        lines.append(f"| {page_size} | {row.batch_size} | {row.band} | {written / 1e6:.2f} "
                     f"| {_us(row.seconds[OURS])} | {ours / 1e9:.2f} | {fill_rate / ours:.1f} "
                     f"| {upstream / 1e9:.2f} |")
    return "\n".join(lines)
