"""`kvfuzz diff extend|decode`: seeded cases through implementations and the oracle, in chunks
spread over worker processes, with progress, first-divergence stop per implementation, and a
summary that counts outcomes and edge classes.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field

from fuzz import corpus
from fuzz.engine import AGREE, DIVERGE, Outcome, check
from fuzz.report import Divergence
from impl.registry import Implementation, resolve
from strategies.generators import generate


@dataclass
class Tally:
    cases: int = 0
    agree: int = 0
    outside_cases: int = 0
    outside: Counter = field(default_factory=Counter)  # (violation kind, behaviour) -> cases
    edges: Counter = field(default_factory=Counter)
    divergence: Divergence | None = None
    seconds: float = 0.0

    def add(self, outcome: Outcome) -> None:
        self.cases += 1
        self.edges.update(outcome.edges)
        if outcome.status == AGREE:
            self.agree += 1
        elif outcome.status != DIVERGE:
            self.outside_cases += 1
            for violation in {v.kind for v in outcome.violations}:
                self.outside[(violation, outcome.behaviour)] += 1
        elif self.divergence is None:
            self.divergence = outcome.divergence

    def merge(self, other: "Tally") -> None:
        self.cases += other.cases
        self.agree += other.agree
        self.outside_cases += other.outside_cases
        self.outside.update(other.outside)
        self.edges.update(other.edges)
        self.seconds += other.seconds
        if other.divergence is not None and (
                self.divergence is None or _index(other.divergence) < _index(self.divergence)):
            self.divergence = other.divergence


def _index(divergence: Divergence) -> int:
    return divergence.case.origin.index if divergence.case.origin else -1


def run_chunk(target: str, spec: str, seed: int, start: int, stop: int, device: str) -> Tally:
    """Cases [start, stop) of `seed` against one implementation; stops at the first divergence."""
    impl = resolve(target, spec)
    fn = impl.load()
    tally = Tally()
    began = time.perf_counter()
    for index in range(start, stop):
        outcome = check(impl, fn, generate(target, seed, index), device)
        tally.add(outcome)
        if outcome.divergence is not None:
            break
    tally.seconds = time.perf_counter() - began
    return tally


@dataclass
class DiffRun:
    target: str
    impls: list[Implementation]
    cases: int
    seed: int = 0
    start: int = 0
    jobs: int = 1
    device: str = "cpu"
    corpus_dir: str = corpus.DEFAULT_DIR
    out: object = sys.stderr
    tallies: dict = field(default_factory=dict)

    def chunks(self) -> list[tuple[str, int, int]]:
        size = max(25, min(500, self.cases // max(1, 8 * self.jobs)))
        bounds = [(lo, min(lo + size, self.start + self.cases))
                  for lo in range(self.start, self.start + self.cases, size)]
        return [(impl.name, lo, hi) for lo, hi in bounds for impl in self.impls]

    def run(self) -> int:
        """Run every chunk; returns the exit status (0 all agree, 1 a divergence)."""
        self.tallies = {impl.name: Tally() for impl in self.impls}
        progress = Progress(self, self.out)
        if self.jobs <= 1:
            for spec, lo, hi in self.chunks():
                if self.tallies[spec].divergence is None:
                    self._absorb(spec, run_chunk(self.target, spec, self.seed, lo, hi,
                                                 self.device), progress)
        else:
            self._run_parallel(progress)
        progress.finish()
        return self._finish()

    def _run_parallel(self, progress: "Progress") -> None:
        pending = list(self.chunks())
        with ProcessPoolExecutor(max_workers=self.jobs, initializer=_quiet_worker) as pool:
            running = {}
            while pending or running:
                while pending and len(running) < 2 * self.jobs:
                    spec, lo, hi = pending.pop(0)
                    if self.tallies[spec].divergence is None:
                        future = pool.submit(run_chunk, self.target, spec, self.seed, lo, hi,
                                             self.device)
                        running[future] = spec
                done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    self._absorb(running.pop(future), future.result(), progress)
                progress.tick()

    def _absorb(self, spec: str, tally: Tally, progress: "Progress") -> None:
        self.tallies[spec].merge(tally)
        progress.tick()

    def _finish(self) -> int:
        status = 0
        for name, tally in self.tallies.items():
            if tally.divergence is not None:
                status = 1
                tally.divergence.saved_path = str(corpus.save(tally.divergence.case,
                                                               self.corpus_dir))
                print(tally.divergence.report(), file=self.out)
        return status


def _quiet_worker() -> None:
    # One thread per worker: the workers already fill the cores, and tiny tensors gain nothing.
    import torch
    torch.set_num_threads(1)


class Progress:
    """A status line every second on a terminal, every ten seconds in a log."""

    def __init__(self, run: DiffRun, out):
        self.run, self.out = run, out
        self.began = self.last = time.monotonic()
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.every = 1.0 if self.tty else 10.0

    def line(self) -> str:
        done = sum(t.cases for t in self.run.tallies.values())
        total = self.run.cases * len(self.run.impls)
        rate = done / max(1e-9, time.monotonic() - self.began)
        diverged = sum(t.divergence is not None for t in self.run.tallies.values())
        return (f"{self.run.target}: {done:,}/{total:,} case runs, {rate:,.0f}/s, "
                f"{diverged} implementation(s) diverged")

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            end = "\r" if self.tty else "\n"
            print(self.line(), end=end, file=self.out, flush=True)

    def finish(self) -> None:
        if self.tty:
            print(" " * 80, end="\r", file=self.out)
        self.elapsed = time.monotonic() - self.began


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 1, 8))
