"""`kvfuzz bench extend|decode|compaction|harness|all [--quick] [--out DIR]`: benchmark figures as
markdown tables (and PNG plots under --out). Figures are printed, never asserted."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

KINDS = ("extend", "decode", "compaction", "harness")
COMPACTION_MODULE = "bench.compaction_syncs"


def add_parser(commands) -> None:
    """Adds the `bench` subcommand to `kvfuzz`'s subparsers; `run(args)` handles it."""
    bench = commands.add_parser("bench", help="performance tables (CPU figures; see bench/)")
    bench.add_argument("kind", choices=KINDS + ("all",), help="what to benchmark")
    bench.add_argument("--quick", action="store_true",
                       help="small grid, short runs: every bench together in under a minute")
    bench.add_argument("--out", default=None, metavar="DIR",
                       help="where PNG plots go (default: bench/out/, git-ignored)")
    bench.set_defaults(handler=run)


def run(args) -> int:
    out_dir = Path(args.out) if args.out else _default_out()
    began = time.monotonic()
    status = 0
    for kind in KINDS if args.kind == "all" else (args.kind,):
        status = max(status, _run_one(kind, args.quick, out_dir))
    if args.kind == "all":
        print(f"\nall benchmarks: {time.monotonic() - began:.0f} s", file=sys.stderr)
    return status


def _default_out() -> Path:
    import kvfuzz.bench
    return Path(bench.__file__).resolve().parent / "out"


def _run_one(kind: str, quick: bool, out_dir: Path) -> int:
    if kind in ("extend", "decode"):
        from kvfuzz.bench import paged
        return paged.main(kind, quick, out_dir)
    if kind == "harness":
        from kvfuzz.bench import harness
        return harness.main(quick, out_dir)
    try:
        module = importlib.import_module(COMPACTION_MODULE)
    except ModuleNotFoundError as error:
        if error.name != COMPACTION_MODULE:
            raise  # a bug inside the module: keep the traceback
        print(f"kvfuzz: error: bench compaction: {COMPACTION_MODULE} is not in this tree yet",
              file=sys.stderr)
        return 2
    # Its own argparse main (bench/compaction_syncs.py, part 3 of issue 7); prints, returns None.
    module.main(["--repeat", "1" if quick else "5"])
    return 0
