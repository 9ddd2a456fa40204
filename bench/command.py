"""`kvfuzz bench extend|decode|compaction|harness|guard|detection|all [--quick] [--out DIR]`: benchmark
figures as markdown tables (and PNG plots under --out). Figures are printed, never asserted.
`detection` measures the fuzzers, not the allocators: how fast each strategy finds each mutant."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

KINDS = ("extend", "decode", "compaction", "harness", "guard", "detection")


def parser() -> argparse.ArgumentParser:
    from kvfuzz.bench.detection import MEASURED_TARGETS, STRATEGIES
    from kvfuzz.fuzz.cli.args import Parser, jobs, seconds

    bench = Parser(prog="kvfuzz bench", description=__doc__)
    bench.add_argument("kind", choices=KINDS + ("all",), help="what to benchmark")
    bench.add_argument("--quick", action="store_true",
                       help="small grid, short runs: every bench together in under a minute")
    bench.add_argument("--out", default=None, metavar="DIR",
                       help="where PNG plots go (default: bench/out/, git-ignored)")
    detection = bench.add_argument_group("detection (time to find each mutant)")
    detection.add_argument("--target", action="append", default=[], choices=MEASURED_TARGETS,
                           help="target(s) to measure (default: all)")
    detection.add_argument("--strategy", action="append", default=[],
                           choices=STRATEGIES, help="strategies (default: all)")
    detection.add_argument("--trials", type=jobs, default=None,
                           help="independent trials per mutant and strategy (default 5)")
    detection.add_argument("--budget", type=seconds, default=None, metavar="SECONDS",
                           help="per trial (default 20; --quick: 5)")
    detection.add_argument("--jobs", type=jobs, default=2, help="trials run in parallel")
    return bench


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    out_dir = Path(args.out) if args.out else Path(__file__).resolve().parent / "out"
    began = time.monotonic()
    status = 0
    for kind in KINDS if args.kind == "all" else (args.kind,):
        if kind == "detection":
            from kvfuzz.bench import detection_command
            status = max(status, detection_command.main(args, out_dir))
            continue
        status = max(status, _run_one(kind, args.quick, out_dir))
    if args.kind == "all":
        print(f"\nall benchmarks: {time.monotonic() - began:.0f} s", file=sys.stderr)
    return status


def _run_one(kind: str, quick: bool, out_dir: Path) -> int:
    if kind in ("extend", "decode"):
        from kvfuzz.bench import paged
        return paged.main(kind, quick, out_dir)
    if kind == "harness":
        from kvfuzz.bench import harness
        return harness.main(quick, out_dir)
    if kind == "guard":
        from kvfuzz.bench import guard
        return guard.main(quick, out_dir)
    from kvfuzz.bench import compaction_syncs
    compaction_syncs.main(["--repeat", "1" if quick else "5"])
    return 0
