"""The seeded run behind `kvfuzz diff`, for every target: chunks of input indices per
implementation over `--jobs` worker processes, with a progress line, a stop at each
implementation's first divergence, and the tallies (kept when Ctrl-C stops the run).
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from kvfuzz.fuzz.summary import rate_text
from kvfuzz.fuzz.tally import Tally
from kvfuzz.fuzz.targets import TARGETS


def run_chunk(target_name: str, spec: str, seed: int, start: int, stop: int,
              device: str = "cpu") -> Tally:
    """Inputs [start, stop) of `seed` against one implementation; stops at the first divergence.
    Module-level, named by strings: it runs in worker processes."""
    target = TARGETS[target_name]
    impl = target.resolve(spec)
    tally = Tally()
    began = time.perf_counter()
    for index in range(start, stop):
        tally.add(target.check(target.generate(seed, index), impl, device), index)
        if tally.divergence is not None:
            break
    tally.seconds = time.perf_counter() - began
    return tally


class SeededRun:
    """One run: a tally per implementation, filled chunk by chunk, here or in workers. `args`
    carries cases, seed, start, jobs and device, as `kvfuzz diff` parses them."""

    def __init__(self, target, specs: list[str], args, out):
        self.target, self.args = target, args
        self.tallies = {spec: Tally() for spec in specs}
        self.progress = Progress(target, self.tallies, args.cases * len(specs), out)

    def chunks(self) -> list[tuple[str, int, int]]:
        """(spec, start, stop), index-major: a lower chunk is always submitted before a higher."""
        low, high = self.target.chunk_sizes
        first, stop = self.args.start, self.args.start + self.args.cases
        size = max(low, min(high, self.args.cases // max(1, 8 * self.args.jobs)))
        return [(spec, lo, min(lo + size, stop)) for lo in range(first, stop, size)
                for spec in self.tallies]

    def run(self) -> None:
        """Fill the tallies; a KeyboardInterrupt leaves them as far as they got."""
        try:
            if self.args.jobs <= 1:
                one_torch_thread()
                for spec, lo, hi in self.chunks():
                    if self.tallies[spec].divergence is None:
                        self._absorb(spec, run_chunk(*self._call(spec, lo, hi)))
            else:
                self._run_parallel()
        finally:
            self.progress.finish()

    def _call(self, spec: str, lo: int, hi: int) -> tuple:
        return self.target.name, spec, self.args.seed, lo, hi, self.args.device

    def _run_parallel(self) -> None:
        pending = self.chunks()[::-1]
        pool = ProcessPoolExecutor(max_workers=self.args.jobs, initializer=_worker_init)
        running = {}
        try:
            while pending or running:
                while pending and len(running) < 2 * self.args.jobs:
                    spec, lo, hi = pending.pop()
                    if self.tallies[spec].divergence is None:
                        running[pool.submit(_in_worker, *self._call(spec, lo, hi))] = spec
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
    one_torch_thread()


def one_torch_thread() -> None:
    # The inputs' tensors are tiny: intra-op threads gain nothing, and on a busy machine two
    # threads per process made a case 40x slower. With --jobs, the workers fill the cores.
    import torch
    torch.set_num_threads(1)


def _in_worker(*args) -> Tally:
    # A running chunk stops at Ctrl-C (its future gets the KeyboardInterrupt, which the parent,
    # interrupted too, never reads): the run ends at once, not when the chunk would have.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_chunk(*args)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class Progress:
    """A status line every second on a terminal, every ten seconds in a log."""

    def __init__(self, target, tallies: dict, total: int, out):
        self.name, self.unit, self.tallies, self.total, self.out = \
            target.name, target.noun + "s", tallies, total, out
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
