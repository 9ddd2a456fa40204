"""`kvfuzz bench harness`, the part a user waits for: `kvfuzz diff` run as a command, per target
against an upstream class (kvfuzz's own where the target is its), so that start-up, worker
processes and isolation are in the figures: the wall time of `--cases 1` (start-up to the first
result), the rate with `--jobs 1` and `--jobs 2` (inputs per second once started: the run's
wall time less that start-up), the CPU seconds all the run's processes used, and beside them
the same check in one process with no isolation (`target.check` in a loop), which says what the
isolation and the workers cost."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

from kvfuzz.bench import harness_floor
from kvfuzz.bench.harness_floor import needs

# (target, implementation, inputs for a rate run, --quick's); the upstream class where there is
# one, as users and CI run them.
ROWS = (("extend", "torch.vectorized", 20000, 2000), ("extend", "sglang.naive", 20000, 2000),
        ("decode", "sglang.naive", 20000, 2000), ("allocator", "sglang.paged", 1000, 30),
        ("swa", "sglang.swa", 1000, 100), ("mamba", "sglang.mamba", 1000, 100),
        ("compaction", "sglang.compaction.lazy", 300, 30),
        ("blockpool", "vllm.blockpool", 1000, 100), ("kvmanager", "vllm.kvmanager", 500, 50))

# --quick (CI's smoke run): the command path whole on one row of kvfuzz's and one of an
# engine's; the floor table's quick row runs SGLang's in process. Each row is four
# runs of its command, one engine import each: CI's minutes are counted, so the engine's row is
# SGLang's allocator (some 5 CPU s an import here), not vLLM's block pool (some 10; 2026-12-07),
# at 30 inputs (100 until CI took 1,839 s, 2026-12-07: a smoke's rates, not a measurement's).
QUICK_ROWS = {("extend", "torch.vectorized"), ("allocator", "sglang.paged")}


def timed_diff(target: str, impl: str, cases: int, jobs: int) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of every process of the run, exit status) of one `kvfuzz diff`
    command (its summary goes to a pipe: no terminal's progress line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", "diff", target, "--impl",
                           impl, "--cases", str(cases), "--jobs", str(jobs)],
                          capture_output=True, text=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):  # 1: a divergence (a finding, still a timed run)
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"kvfuzz diff {target} --impl {impl}: exit {done.returncode}: "
                           f"{tail[0]}")
    return wall, cpu, done.returncode


def in_process_rate(target_name: str, impl_name: str, cases: int) -> float:
    """Inputs per second of `target.check` in this process (the implementation loaded here, no
    worker, no isolation), generation included."""
    from kvfuzz.fuzz.targets import TARGETS

    target = TARGETS[target_name]
    impl = target.catalogue.resolve(impl_name)
    target.check(target.generator.generate(0, 0, [impl]), impl)  # warm-up: imports
    began = time.perf_counter()
    for index in range(cases):
        target.check(target.generator.generate(0, index, [impl]), impl)
    return cases / (time.perf_counter() - began)


def main(quick: bool) -> int:
    print("\nWhole commands (`kvfuzz diff T --impl I`, a subprocess each, output to a pipe): "
          "start-up is the wall time of `--cases 1`; a rate is inputs per second once started "
          "(the run's wall time less the start-up); cores busy is a run's CPU seconds (every "
          "process) over its wall seconds: a worker judges in one process and runs the "
          "implementation in another, so `--jobs 1` already keeps more than one core busy, and "
          "on C cores `--jobs 2` can gain at most C / (jobs 1's cores busy); CPU is the user + "
          "system seconds of every process of the `--jobs 2` run per 1,000 inputs; in-process is `target.check` in a "
          "loop in one process with no worker and no isolation.\n")
    print(f"{os.cpu_count()} CPU cores.\n")
    print("| target | implementation | inputs | start-up s | jobs 1 /s | jobs 2 /s | jobs 2 / "
          "jobs 1 | cores busy, jobs 1 | cores busy, jobs 2 | CPU s per 1,000 (jobs 2) "
          "| in-process /s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for target, impl, full, small in ROWS:
        if quick and (target, impl) not in QUICK_ROWS:
            continue
        cases = small if quick else full
        missing = needs(impl)
        if missing:
            print(f"| {target} | {impl} | not run: needs {missing} (kvfuzz upstream fetch) "
                  f"| | | | | | | | |", flush=True)
            continue
        start, _, _ = timed_diff(target, impl, 1, 1)
        rates, busy, cpu = {}, {}, 0.0
        for jobs in (1, 2):
            wall, cpu, _ = timed_diff(target, impl, cases, jobs)
            rates[jobs] = cases / max(wall - start, 1e-3)
            busy[jobs] = cpu / max(wall, 1e-3)
        local = in_process_rate(target, impl, min(cases, 1000 if quick else 5000))
        print(f"| {target} | {impl} | {cases:,} | {start:.1f} | {rates[1]:,.0f} "
              f"| {rates[2]:,.0f} | {rates[2] / rates[1]:.2f}x | {busy[1]:.2f} | {busy[2]:.2f} "
              f"| {1000 * cpu / cases:.1f} | {local:,.0f} |", flush=True)
    return harness_floor.main(quick)
