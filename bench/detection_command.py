"""`kvfuzz bench detection`: run the trials (`detection.py`), print the tables and write the
survival plot (`detection_report.py`)."""

from __future__ import annotations

import datetime
import os
import platform
import sys
import time

from kvfuzz.bench import detection, detection_report


def main(args, out_dir) -> int:
    config = detection.QUICK if args.quick else detection.FULL
    targets = args.target or list(detection.MEASURED_TARGETS)
    strategies = args.strategy or list(detection.STRATEGIES)
    trials = args.trials or config["trials"]
    budget = args.budget or config["budget"]
    began = time.monotonic()
    print(f"\n### kvfuzz bench detection{' --quick' if args.quick else ''} "
          f"({datetime.date.today().isoformat()})\n\n"
          f"{os.cpu_count()} CPU cores, Python {platform.python_version()}, {args.jobs} trial(s) "
          f"at a time; {trials} trial(s) per mutant and strategy (seed = trial), each until the "
          f"first divergence or {budget:g} s / {config['cases']:,} inputs. Cells: median inputs "
          f"/ median seconds to detection over the trials that found it (found/trials).",
          flush=True)
    results = detection.run_all(targets, strategies, trials, budget, config["cases"],
                                args.quick, args.jobs,
                                progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(detection_report.tables(results, strategies, trials))
    png = detection_report.survival_plot(results, strategies, out_dir)
    print(f"\nplot: {png}" if png else "\nplot: skipped (matplotlib not installed)")
    print(f"({time.monotonic() - began:.0f} s)")
    return 0
