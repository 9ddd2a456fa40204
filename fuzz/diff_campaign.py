"""The seeded run behind every `kvfuzz diff` target: chunks of indices per implementation, over
`--jobs` worker processes, with a progress line, a stop at each implementation's first divergence
and the summary (also on Ctrl-C, exit 130). A target describes itself with a `DiffTarget`.
"""

from __future__ import annotations

import signal
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable


@dataclass
class Tally:
    """One implementation's counts. A target's tally may add fields (merged in a `merge` that calls
    this one) and its own `add(result)`. `at`: the index of `divergence`."""

    cases: int = 0
    agree: int = 0
    seconds: float = 0.0
    divergence: object = None
    at: int = -1

    def add(self, found) -> None:
        """Count one case: `found` is None when it agreed, else its divergence."""
        self.cases += 1
        if found is None:
            self.agree += 1
        else:
            self.divergence = found

    def merge(self, other: "Tally") -> None:
        self.cases += other.cases
        self.agree += other.agree
        self.seconds += other.seconds
        # Chunks finish in any order: report the lowest index, whichever worker found it.
        if other.divergence is not None and (self.divergence is None or other.at < self.at):
            self.divergence, self.at = other.divergence, other.at


def run_indices(tally: Tally, start: int, stop: int, outcome: Callable[[int], object]) -> Tally:
    """`tally.add(outcome(index))` over [start, stop), stopping at the first divergence."""
    began = time.perf_counter()
    for index in range(start, stop):
        tally.add(outcome(index))
        if tally.divergence is not None:
            tally.at = index
            break
    tally.seconds = time.perf_counter() - began
    return tally


@dataclass(frozen=True)
class DiffTarget:
    """What a target plugs in. `chunk(spec, seed, start, stop, device) -> Tally` runs in worker
    processes, so it must pickle (a module-level function or a partial of one)."""

    name: str
    chunk: Callable[[str, int, int, int, str], Tally]
    summary: Callable[[dict, float, bool], str]  # (tallies, elapsed, interrupted)
    finish: Callable[[dict, object, object], int]  # (tallies, args, out): save, report, status
    tally: Callable[[], Tally] = Tally
    unit: str = "cases"
    chunk_sizes: tuple[int, int] = (25, 500)


def run(target: DiffTarget, specs: list[str], args, out=None) -> int:
    """Run `args.cases` indices from `args.start` of `args.seed` on every spec; exit status 0 all
    agree, 1 a divergence (left to `target.finish` to save and report), 130 interrupted."""
    out = out or sys.stderr  # looked up now: a test may have replaced it
    diff_run = DiffRun(target, specs, args, out)
    began = time.monotonic()
    try:
        diff_run.run()
        status = target.finish(diff_run.tallies, args, out)
    except KeyboardInterrupt:
        print(target.summary(diff_run.tallies, time.monotonic() - began, True), file=out)
        return 130
    print(target.summary(diff_run.tallies, time.monotonic() - began, False), file=out)
    return status


class DiffRun:
    """One run: the tallies per spec, filled chunk by chunk, in this process or in workers."""

    def __init__(self, target: DiffTarget, specs: list[str], args, out):
        self.target, self.args = target, args
        self.tallies = {spec: target.tally() for spec in specs}
        self.progress = Progress(target, self.tallies, args.cases * len(specs), out)

    def chunks(self) -> list[tuple[str, int, int]]:
        """(spec, start, stop), index-major: a lower chunk is always submitted before a higher."""
        low, high = self.target.chunk_sizes
        first, stop = self.args.start, self.args.start + self.args.cases
        size = max(low, min(high, self.args.cases // max(1, 8 * self.args.jobs)))
        return [(spec, lo, min(lo + size, stop)) for lo in range(first, stop, size)
                for spec in self.tallies]

    def run(self) -> None:
        if self.args.jobs <= 1:
            _one_torch_thread()
            for spec, lo, hi in self.chunks():
                if self.tallies[spec].divergence is None:
                    self._absorb(spec, self.target.chunk(spec, *self._call(lo, hi)))
        else:
            self._run_parallel()
        self.progress.finish()

    def _call(self, lo: int, hi: int) -> tuple:
        return self.args.seed, lo, hi, self.args.device

    def _run_parallel(self) -> None:
        pending = self.chunks()[::-1]
        pool = ProcessPoolExecutor(max_workers=self.args.jobs, initializer=_worker_init)
        running = {}
        try:
            while pending or running:
                while pending and len(running) < 2 * self.args.jobs:
                    spec, lo, hi = pending.pop()
                    if self.tallies[spec].divergence is None:
                        future = pool.submit(_in_worker, self.target.chunk, spec,
                                             *self._call(lo, hi))
                        running[future] = spec
                done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    self._absorb(running.pop(future), future.result())
                self.progress.tick()
        finally:  # on Ctrl-C: drop what has not started; the running chunks were interrupted
            pool.shutdown(wait=False, cancel_futures=True)

    def _absorb(self, spec: str, tally: Tally) -> None:
        self.tallies[spec].merge(tally)
        self.progress.tick()


def _worker_init() -> None:
    # Ctrl-C reaches the workers too. An idle one would print a traceback: it ignores it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _one_torch_thread()


def _one_torch_thread() -> None:
    # The cases' tensors are tiny: intra-op threads gain nothing, and on a busy machine two
    # threads per process made a case 40x slower. With --jobs, the workers fill the cores.
    import torch
    torch.set_num_threads(1)


def _in_worker(chunk, *args):
    # A running chunk stops at Ctrl-C (its future gets the KeyboardInterrupt, which the parent,
    # interrupted too, never reads): the run ends at once, not when the chunk would have.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return chunk(*args)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class Progress:
    """A status line every second on a terminal, every ten seconds in a log."""

    def __init__(self, target: DiffTarget, tallies: dict, total: int, out):
        self.name, self.unit, self.tallies, self.total, self.out = \
            target.name, target.unit, tallies, total, out
        self.began = self.last = time.monotonic()
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.every = 1.0 if self.tty else 10.0

    def line(self) -> str:
        done = sum(t.cases for t in self.tallies.values())
        diverged = sum(t.divergence is not None for t in self.tallies.values())
        rate = rate_text(done, time.monotonic() - self.began)
        return (f"{self.name}: {done:,}/{self.total:,} {self.unit}, {rate}/s, "
                f"{diverged} implementation(s) diverged")

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(self.line(), end="\r" if self.tty else "\n", file=self.out, flush=True)

    def finish(self) -> None:
        if self.tty:
            print(" " * 80, end="\r", file=self.out)


def rate_text(count: int, seconds: float) -> str:
    rate = count / seconds if seconds > 0 else 0.0
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:,.1f}"
