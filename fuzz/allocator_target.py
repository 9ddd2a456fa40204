"""`kvfuzz diff allocator` and `kvfuzz replay` of "kvfuzz-allocator-trace/1" files: seeded traces
through allocator classes and the oracle, chunks over worker processes, progress, shrinking, corpus.

    kvfuzz diff allocator --cases 2000 --jobs 2
    kvfuzz diff allocator --impl sglang.srt.mem_cache.allocator.paged:PagedTokenToKVPoolAllocator
Exit status: 0 no divergence (known upstream differences are counted and shown, not failures),
1 a divergence (shrunk, saved under corpus/, report printed). Imports torch only when run.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from fuzz.targets import Target, register

FORMAT = "kvfuzz-allocator-trace/1"


@dataclass
class Tally:
    cases: int = 0
    agree: int = 0
    known: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # known class -> first divergence
    events: Counter = field(default_factory=Counter)
    divergence: object = None
    seconds: float = 0.0

    def merge(self, other: "Tally") -> None:
        self.cases += other.cases
        self.agree += other.agree
        self.known.update(other.known)
        self.events.update(other.events)
        self.seconds += other.seconds
        for known, example in other.examples.items():
            self.examples.setdefault(known, example)
        if other.divergence is not None and (self.divergence is None or _index(other.divergence)
                                             < _index(self.divergence)):
            self.divergence = other.divergence


def _index(divergence) -> int:
    return divergence.trace.origin.index if divergence.trace.origin else -1


def run_chunk(spec: str, seed: int, start: int, stop: int, device: str) -> Tally:
    """Traces [start, stop) of `seed` on one implementation; stops at the first divergence."""
    from fuzz.allocator_diff import run_trace
    from strategies.allocator_trace import generate_trace

    tally, began = Tally(), time.perf_counter()
    for index in range(start, stop):
        found = run_trace(generate_trace(seed, index), spec, device, events=tally.events)
        tally.cases += 1
        if found is None:
            tally.agree += 1
        elif found.known:
            tally.known[found.known] += 1
            tally.examples.setdefault(found.known, found)
        else:
            tally.divergence = found
            break
    tally.seconds = time.perf_counter() - began
    return tally


def diff_main(args, out=None) -> int:
    out = out or sys.stderr  # looked up now: a test may have replaced it
    from impl.allocator_registry import allocators, resolve_allocator
    from impl.registry import BUNDLED

    impls = [resolve_allocator(spec) for spec in args.impl] or allocators(BUNDLED)
    tallies = {impl.name: Tally() for impl in impls}
    size = max(10, min(200, args.cases // max(1, 8 * args.jobs)))
    chunks = [(impl.name, lo, min(lo + size, args.start + args.cases))
              for lo in range(args.start, args.start + args.cases, size) for impl in impls]
    began = time.monotonic()
    progress = _Progress(tallies, args.cases * len(impls), out)
    try:
        if args.jobs <= 1:
            for spec, lo, hi in chunks:
                if tallies[spec].divergence is None:
                    tallies[spec].merge(run_chunk(spec, args.seed, lo, hi, args.device))
                    progress.tick()
        else:
            _run_parallel(chunks, tallies, args, progress)
    except KeyboardInterrupt:
        print(summary(tallies, time.monotonic() - began, interrupted=True), file=out)
        return 130
    status = _finish(tallies, args, out)
    print(summary(tallies, time.monotonic() - began), file=out)
    return status


def _run_parallel(chunks, tallies, args, progress) -> None:
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pending = list(chunks)
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_quiet_worker) as pool:
        running = {}
        while pending or running:
            while pending and len(running) < 2 * args.jobs:
                spec, lo, hi = pending.pop(0)
                if tallies[spec].divergence is None:
                    running[pool.submit(run_chunk, spec, args.seed, lo, hi, args.device)] = spec
            done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                tallies[running.pop(future)].merge(future.result())
            progress.tick()


def _quiet_worker() -> None:
    import torch
    torch.set_num_threads(1)  # the workers already fill the cores


def _finish(tallies: dict, args, out) -> int:
    """Shrink, save and print the divergence of each implementation and one example per known
    upstream difference; returns the exit status."""
    from fuzz.allocator_shrink import shrink
    from fuzz.corpus import save_json
    from strategies.allocator_trace import to_json

    status = 0
    for tally in tallies.values():
        found = ([tally.divergence] if tally.divergence else []) + list(tally.examples.values())
        for divergence in found:
            status = max(status, 0 if divergence.known else 1)
            small = shrink(divergence, args.device)
            small.saved_path = str(save_json(to_json(small.trace), small.corpus_name(),
                                             args.corpus))
            print(small.report(), file=out)
    return status


def summary(tallies: dict, elapsed: float, interrupted: bool = False) -> str:
    lines = ["summary: allocator" + ("  (interrupted: counts so far)" if interrupted else "")]
    width = max([34] + [len(name) + 2 for name in tallies])
    lines.append(f"  {'implementation':<{width}}{'traces':>8}{'agree':>8}{'known':>7}{'diverged':>10}"
                 f"{'traces/s':>10}")
    for name, tally in tallies.items():
        rate = tally.cases / tally.seconds if tally.seconds else 0.0
        lines.append(f"  {name:<{width}}{tally.cases:>8,}{tally.agree:>8,}{sum(tally.known.values()):>7,}"
                     f"{'yes' if tally.divergence else 'no':>10}{rate:>10,.1f}")
        for known, count in tally.known.items():
            lines.append(f"    known upstream difference x{count}: {known.split(':')[0]}")
    if tallies:
        events = max(tallies.values(), key=lambda t: t.cases).events
        cells = [f"{name} {count:,}" for name, count in sorted(events.items())]
        lines.append("  calls and edge classes:")
        lines += ["    " + " | ".join(cells[i:i + 4]) for i in range(0, len(cells), 4)]
    lines.append(f"  wall time {elapsed:.1f} s")
    return "\n".join(lines)


class _Progress:
    def __init__(self, tallies: dict, total: int, out):
        self.tallies, self.total, self.out = tallies, total, out
        self.began = self.last = time.monotonic()
        self.every = 1.0 if getattr(out, "isatty", lambda: False)() else 10.0

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            done = sum(t.cases for t in self.tallies.values())
            diverged = sum(t.divergence is not None for t in self.tallies.values())
            print(f"allocator: {done:,}/{self.total:,} trace runs, "
                  f"{done / (now - self.began):,.1f}/s, {diverged} implementation(s) diverged",
                  file=self.out, flush=True)


def replay_file(path, data: dict, impl_specs, out) -> int:
    """Replay one saved trace on each implementation (default: the bundled ones)."""
    from fuzz.allocator_diff import run_trace
    from impl.allocator_registry import allocators, resolve_allocator
    from impl.registry import BUNDLED
    from strategies.allocator_trace import from_json

    trace = from_json(data, source=str(path))
    impls = [resolve_allocator(spec) for spec in impl_specs] or allocators(BUNDLED)
    status = 0
    for impl in impls:
        found = run_trace(trace, impl.name)
        if found is None:
            print(f"ok                {path}  {impl.name}", file=out)
            continue
        found.saved_path = str(path)
        status = max(status, 0 if found.known else 1)
        print(found.report(), file=out)
    return status


register(Target("allocator", FORMAT, diff="fuzz.allocator_target:diff_main",
                replay="fuzz.allocator_target:replay_file"))
