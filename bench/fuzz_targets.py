"""Executions per second of the atheris targets, one worker on one core (pinned with taskset
where available). Prints a markdown table; asserts nothing.

    .venv/bin/python -m kvfuzz.bench.fuzz_targets [--time 60] [--impl torch.vectorized] [TARGET ...]

`execs/s` is libFuzzer's own average (startup included); `execs/CPU-s` divides by the CPU time
the worker used, which stays meaningful on a machine shared with other jobs.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kvfuzz.fuzz.campaign.specs import SPECS


def measure(target: str, seconds: int, impl: str) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"kvfuzz-bench-{target}-"))
    env = dict(os.environ, KVFUZZ_FOUND=str(work / "found"), KVFUZZ_IMPL=impl,
               OMP_NUM_THREADS="1")
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    command = [*pin, sys.executable, *SPECS[target].command, str(work),
               f"-max_total_time={seconds}", "-seed=1", "-print_final_stats=1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(work, ignore_errors=True)
    stats = dict(re.findall(r"stat::(\w+):\s+(\d+)", result.stderr))
    execs = int(stats.get("number_of_executed_units", 0))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    label = (impl or "all bundled") if SPECS[target].takes_impl else "-"
    return {"target": target, "impl": label, "execs": execs,
            "per_s": int(stats.get("average_exec_per_sec", 0)), "cpu": cpu,
            "rc": result.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", default=["extend"])
    parser.add_argument("--time", type=int, default=60, help="seconds per target")
    parser.add_argument("--impl", default="", help="KVFUZZ_IMPL for the paged targets")
    args = parser.parse_args()
    print("| target | implementations | execs | execs/s | CPU s | execs/CPU-s | exit |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for target in args.targets:
        row = measure(target, args.time, args.impl if SPECS[target].takes_impl else "")
        print(f"| {row['target']} | {row['impl']} | {row['execs']:,} | {row['per_s']:,} | "
              f"{row['cpu']:.1f} | {row['execs'] / max(row['cpu'], 1e-9):,.0f} | {row['rc']} |")


if __name__ == "__main__":
    main()
