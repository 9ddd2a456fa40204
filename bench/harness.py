"""`kvfuzz bench harness`: differential cases per second per target and implementation (generate
a seeded case, run the implementation and the oracle, compare), so CI budgets can be planned;
then every target as a user runs it, start-up and workers included (`harness_commands.py`)."""

from __future__ import annotations

import time
from collections import Counter

import torch

from kvfuzz.fuzz.engine.target import AGREE, DIVERGE, OUTSIDE_CONTRACT
from kvfuzz.fuzz.targets import TARGETS

FULL_CASES, QUICK_CASES = 3000, 300
SEED = 0


def rate(target, impl, num_cases: int) -> tuple[float, float, Counter]:
    """(cases per second, generation's share of the time, outcomes by status) on one core."""
    # Warm-up: imports, first-call allocations.
    target.check(target.generator.generate(SEED, 0), impl)
    generating = checking = 0.0
    statuses = Counter()
    for index in range(num_cases):
        began = time.perf_counter()
        case = target.generator.generate(SEED, index)
        middle = time.perf_counter()
        statuses[target.check(case, impl).status] += 1
        generating += middle - began
        checking += time.perf_counter() - middle
    total = generating + checking
    return num_cases / total, generating / total, statuses


def main(quick: bool, out_dir=None) -> int:
    torch.set_num_threads(1)  # one worker process = one core; `kvfuzz diff --jobs N` scales it
    num_cases = QUICK_CASES if quick else FULL_CASES
    print(f"\n### kvfuzz bench harness{' --quick' if quick else ''}\n\n"
          f"{num_cases} seeded cases (seed {SEED}) per row, one process, one torch thread, "
          "CPU; wall-clock rate of generate + implementation + oracle + compare.\n")
    print("| target | implementation | cases/s | generation share | agree | outside contract "
          "| diverge |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in ("extend", "decode"):
        for impl in TARGETS[name].catalogue.defaults():
            per_second, generation, statuses = rate(TARGETS[name], impl, num_cases)
            print(f"| {name} | {impl.name} | {per_second:,.0f} | {generation:.0%} "
                  f"| {statuses[AGREE]} | {statuses[OUTSIDE_CONTRACT]} | {statuses[DIVERGE]} |",
                  flush=True)
    from kvfuzz.bench import harness_commands

    return harness_commands.main(quick)
