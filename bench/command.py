"""`kvfuzz bench extend|decode|compaction|harness|all [--quick] [--out DIR]`: benchmark figures as
markdown tables (and PNG plots under --out). Figures are printed, never asserted."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

KINDS = ("extend", "decode", "compaction", "harness")


def parser() -> argparse.ArgumentParser:
    from kvfuzz.fuzz.args import Parser

    bench = Parser(prog="kvfuzz bench", description=__doc__)
    bench.add_argument("kind", choices=KINDS + ("all",), help="what to benchmark")
    bench.add_argument("--quick", action="store_true",
                       help="small grid, short runs: every bench together in under a minute")
    bench.add_argument("--out", default=None, metavar="DIR",
                       help="where PNG plots go (default: bench/out/, git-ignored)")
    return bench


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    out_dir = Path(args.out) if args.out else Path(__file__).resolve().parent / "out"
    began = time.monotonic()
    status = 0
    for kind in KINDS if args.kind == "all" else (args.kind,):
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
    from kvfuzz.bench import compaction_syncs
    compaction_syncs.main(["--repeat", "1" if quick else "5"])
    return 0
