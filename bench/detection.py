"""`kvfuzz bench detection`: how fast each way of generating inputs finds each catalogued mutant,
measured as FuzzBench and Magma do: several independent trials per (mutant, strategy), each until
the first divergence or the budget, with the inputs and seconds it took.

Strategies: `seeded` (the default `kvfuzz diff` generators, with their edge classes and
steering), `uniform` (plain uniform-random inputs of the same sizes: the baseline each generator
part declares, `strategies/<target>/uniform.py`),
`hypothesis` (the public strategies), `atheris` (libFuzzer with structure-aware decoding and the
allocator-state features) and `atheris-plain` (the same without the features). Trial k uses seed
k everywhere; atheris starts from its target's pseudo-random seed inputs, as `kvfuzz fuzz` does
(not from the corpus encodings: those would give the mutants away), and its time counts from its
first input.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from kvfuzz.fuzz.campaign.specs import SPECS, seed_inputs
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import MUTANT, OURS

# Every target of the table (each has a mutant catalogue; case_loader, not a target, has none).
MEASURED_TARGETS = tuple(TARGETS)
STRATEGIES = ("seeded", "uniform", "hypothesis", "atheris", "atheris-plain")
FULL = dict(trials=5, budget=20.0, cases=10_000)
QUICK = dict(trials=1, budget=5.0, cases=1_000)


@dataclass(frozen=True)
class Trial:
    target: str
    mutant: str
    strategy: str
    trial: int
    found: bool
    cases: int      # inputs run up to and including the first divergence (or all, if none)
    seconds: float


def mutants(target: str, quick: bool) -> list[str]:
    """The catalogue's mutants of kvfuzz's own implementations. Mutants of upstream code (which
    need it installed, and get traces of their own class's profile) are left to their tests,
    except for a target with no implementation of its own (blockpool: vLLM's), whose upstream
    mutants are measured where their package is installed."""
    catalogue = TARGETS[target].catalogue.implementations
    own = any(impl.kind == OURS for impl in catalogue)
    names = [impl.name for impl in catalogue if impl.kind == MUTANT
             and (impl.requires is None if own else impl.available())]
    return names[:1] if quick else names


def run_trial(target: str, mutant: str, strategy: str, trial: int, budget: float,
              cases: int) -> Trial:
    if strategy.startswith("atheris"):
        found, used, seconds = _atheris(target, mutant, trial, budget, strategy == "atheris")
    else:
        import torch
        torch.set_num_threads(1)
        found, used, seconds = _in_process(TARGETS[target], mutant, strategy, trial, budget, cases)
    return Trial(target, mutant, strategy, trial, found, used, seconds)


def _inputs(target, strategy: str, trial: int, impl):
    """The seeded generator's inputs, or its aimless baseline (the generator part's `uniform`),
    both within what `impl` declares (an input outside it would be counted but never run)."""
    if strategy == "seeded":
        return (target.generator.generate(trial, index, (impl,)) for index in count())
    return (target.generator.uniform(random.Random(f"uniform/{target.name}:{trial}:{index}"),
                                     impl.preconditions)
            for index in count())


def _in_process(target, mutant: str, strategy: str, trial: int, budget: float, cases: int):
    impl = target.catalogue.resolve(mutant)
    began, used = time.perf_counter(), 0

    def diverges(item) -> bool:
        nonlocal used
        used += 1
        return target.check(item, impl).status == DIVERGE

    if strategy == "hypothesis":
        found = _hypothesis(target.name, diverges, trial, cases, lambda: time.perf_counter()
                            - began > budget)
        return found, used, time.perf_counter() - began
    for item in _inputs(target, strategy, trial, impl):
        if diverges(item):
            return True, used, time.perf_counter() - began
        if used >= cases or time.perf_counter() - began > budget:
            break
    return False, used, time.perf_counter() - began


class _Stop(Exception):
    """Ends a Hypothesis run: found, or out of time."""


def _hypothesis(target: str, diverges, trial: int, cases: int, out_of_time) -> bool:
    from hypothesis import HealthCheck, Phase, given, seed, settings

    strategy = TARGETS[target].generator.strategy()
    found = []

    @seed(trial)
    @settings(max_examples=cases, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def agrees(item):
        if found or out_of_time():
            raise _Stop  # Hypothesis replays a failure at the end: not a new input
        if diverges(item):
            found.append(True)
            raise _Stop

    try:
        agrees()
    except Exception:  # noqa: BLE001 - _Stop, as Hypothesis re-raises (or wraps) it
        pass
    return bool(found)


def _atheris(target: str, mutant: str, trial: int, budget: float, features: bool):
    with tempfile.TemporaryDirectory(prefix="kvfuzz-detection-") as work:
        work = Path(work)
        for name in ("bytes", "found", "stats"):
            (work / name).mkdir()
        for number, data in enumerate(seed_inputs(TARGETS[target])):  # as `kvfuzz fuzz` does
            (work / "bytes" / f"seed-{number}").write_bytes(data)
        env = dict(os.environ, KVFUZZ_IMPL=mutant, KVFUZZ_FOUND=str(work / "found"),
                   KVFUZZ_STATS=str(work / "stats"), KVFUZZ_FEATURES="1" if features else "0",
                   OMP_NUM_THREADS="1")
        command = [sys.executable, *SPECS[target].command, str(work / "bytes"),
                   f"-seed={trial}", f"-max_total_time={max(1, round(budget))}",
                   f"-artifact_prefix={work}/", *TARGETS[target].settings.fuzz_flags]
        subprocess.run(command, cwd=work, env=env, capture_output=True, timeout=budget + 300)
        found = any((work / "found").iterdir())
        stats = [json.loads(p.read_text()) for p in (work / "stats").glob("*.json")]
        if not stats:
            return found, 0, budget
        execs, began, ended = stats[0]["execs"], stats[0]["began"], stats[0]["time"]
        return found, execs + found, (ended - began) if found and began else budget


def run_all(targets, strategies, trials: int, budget: float, cases: int, quick: bool,
            jobs: int, progress=print) -> list[Trial]:
    # A target whose generator declares no uniform baseline has no "uniform" column.
    tasks = [(t, m, s, k, budget, cases) for k in range(1, trials + 1) for t in targets
             for m in mutants(t, quick) for s in strategies
             if s != "uniform" or TARGETS[t].generator.uniform is not None]
    results = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_trial, *task) for task in tasks]
        for done, future in enumerate(as_completed(futures), 1):
            trial = future.result()
            results.append(trial)
            progress(f"  [{done}/{len(tasks)}] {trial.target} {trial.mutant} {trial.strategy} "
                     f"#{trial.trial}: " + (f"found after {trial.cases:,} inputs, "
                                           f"{trial.seconds:.2f} s" if trial.found else
                                           f"not found in {trial.cases:,} inputs"))
    return results
