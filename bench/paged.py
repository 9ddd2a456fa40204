"""`kvfuzz bench extend|decode`: the per-request loop, the upstream formulation of PR #37938 and
our production function on the same seeded workloads; markdown tables of median times and
speedups, and a PNG of speedup vs batch size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from kvfuzz.bench import tables, workloads
from kvfuzz.bench.timing import copy_bandwidth, fill_bandwidth, median_seconds, prepared_call
from kvfuzz.fuzz.targets import TARGETS

IMPLS = ("torch.loop", "torch.three_phase", "torch.vectorized")  # baseline first
FULL = dict(batch_sizes=workloads.BATCH_SIZES, page_sizes=workloads.PAGE_SIZES, min_run_time=0.2)
QUICK = dict(batch_sizes=(1, 8, 64), page_sizes=(1, 16), min_run_time=0.02)


@dataclass(frozen=True)
class Row:
    band: str          # extend-length band, "1" for decode
    batch_size: int
    page_size: int
    num_tokens: int
    seconds: dict      # implementation name -> median seconds per call

    def speedup(self, name: str, over: str = IMPLS[0]) -> float:
        return self.seconds[over] / self.seconds[name]


def measure(target: str, case, min_run_time: float, band: str) -> Row:
    """Times every implementation on `case`, after checking they all write the same slots."""
    seconds, outputs = {}, {}
    for name in IMPLS:
        call, out = prepared_call(TARGETS[target].catalogue.resolve(name).load(), case)
        seconds[name] = median_seconds(call, min_run_time)
        outputs[name] = out
    reference = outputs[IMPLS[0]]
    for name, out in outputs.items():
        if not torch.equal(out, reference):  # a benchmark of a wrong function is worthless
            raise AssertionError(f"bench {target} bs={case.batch_size} P={case.page_size} "
                                 f"band {band}: {name} disagrees with {IMPLS[0]}")
    return Row(band, case.batch_size, case.page_size, case.output_length(), seconds)


def run(target: str, quick: bool, progress=print) -> list[Row]:
    torch.set_num_threads(1)  # stable figures on a shared 2-core machine; the loop is serial anyway
    config = QUICK if quick else FULL
    bands = list(workloads.BANDS) if target == "extend" else ["1"]
    rows = []
    for band in bands:
        for page_size in config["page_sizes"]:
            for batch_size in config["batch_sizes"]:
                case = (workloads.extend_case(batch_size, page_size, band) if target == "extend"
                        else workloads.decode_case(batch_size, page_size))
                rows.append(measure(target, case, config["min_run_time"], band))
                progress(f"  {target} band {band} P={page_size} bs={batch_size}: "
                         f"{tables.times(rows[-1])}")
    return rows


def main(target: str, quick: bool, out_dir) -> int:
    began = time.monotonic()
    rows = run(target, quick)
    print(tables.header(target, quick))
    print(tables.full_table(target, rows))
    if target == "extend":  # decode outputs are a few KB: per-op overhead, not bandwidth
        print(tables.upstream_comparison(rows))
        largest = max(rows, key=lambda row: row.num_tokens)
        print(tables.bandwidth_note(rows, fill_bandwidth(largest.num_tokens * 8),
                                    copy_bandwidth(1 << 28)))
    from kvfuzz.bench import plot
    png = plot.speedup_plot(target, rows, out_dir)
    print(f"\nplot: {png}" if png else "\nplot: skipped (matplotlib not installed)")
    print(f"({time.monotonic() - began:.0f} s)")
    return 0
