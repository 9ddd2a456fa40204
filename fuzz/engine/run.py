"""The seeded run behind `kvfuzz diff`, for every target: chunks of input indices per
implementation, checked in `--jobs` supervised worker processes (`isolation.py`), with a
progress line, a stop at each implementation's first divergence (with `keep_going`: none, every
input is checked and each distinct divergence is a finding), and each finding handed to
`on_found` the moment it arrives (so it is saved before anything else can go wrong).

A worker that dies or times out on an input is that implementation's divergence at that index;
a fresh worker takes the next chunk, and the inputs the dead one had checked since its last
report (reports come every half second) are checked again.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass

from kvfuzz.fuzz.engine.apart import LOAD_GRACE
from kvfuzz.fuzz.engine.containment import sweep
from kvfuzz.fuzz.engine.frames import ProtocolError
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY
from kvfuzz.fuzz.engine.isolation import (DEFAULT_TIMEOUT, Worker, crash_outcome, death,
                                          JUDGE_MARGIN, guarded_check, late_what, mark,
                                          preload, raise_from_worker, wait_any)
from kvfuzz.fuzz.engine.stop_signals import held
from kvfuzz.fuzz.engine.summary import rate_text
from kvfuzz.fuzz.engine.tally import Tally
from kvfuzz.fuzz.targets import TARGETS

REPORT_EVERY = 0.5  # seconds between a worker's progress reports
# Inputs an implementation's process is asked for beyond the one being judged: it works ahead
# instead of waiting for the judge (`impl_process.Judging.check`).
LOOKAHEAD = 3


@dataclass(frozen=True)
class RunOptions:
    """What a seeded run takes, built by `kvfuzz diff` and by `kvfuzz.diff` alike: inputs
    [start, start + cases) of `seed`, in `jobs` workers, each input timed out after `timeout`
    seconds; divergences saved under `corpus` (None: not saved)."""

    cases: int
    seed: int = 0
    start: int = 0
    jobs: int = 1
    device: str = "cpu"
    timeout: float = DEFAULT_TIMEOUT
    corpus: str | None = None
    memory: int = DEFAULT_MEMORY
    # Go on after a divergence: every input is checked, and the first input of each distinct
    # divergence signature (`Divergence.signature`) is a finding of its own.
    keep_going: bool = False
    # The generator profile whose inputs alone run (`Target.alone`; None: the generator's mix).
    profile: str | None = None


def run_chunk(target_name: str, impl, seed: int, start: int, stop: int,
              device: str = "cpu", report_every: float = REPORT_EVERY, keep_going: bool = False,
              profile: str | None = None, state=None, report=None) -> Tally:
    """Inputs [start, stop) of `seed` against one implementation (an `Implementation`, or a name
    or import path); stops at the first divergence unless `keep_going`. In a worker, `state`
    says which input runs since when (`isolation.mark`) and `report` sends ("progress", name,
    tally) deltas, at once when one holds a divergence of a signature new to the chunk.
    `profile`: the inputs of that generator profile alone (`Target.alone`)."""
    if state is not None:
        # A crash (or a hang past the grace) while loading the implementation is put on the
        # first input; each input's own clock starts after the load.
        mark(state, start, grace=LOAD_GRACE)
    target = TARGETS[target_name].alone(profile)
    impl = target.catalogue.resolve(impl) if isinstance(impl, str) else impl
    spec = impl.name
    preload(impl)
    tally, total, began = Tally(), Tally(), time.perf_counter()
    seen = set()  # the signatures this chunk has reported
    ahead = collections.deque()  # this input and the next LOOKAHEAD, generated once each
    for index in range(start, stop):
        while len(ahead) <= LOOKAHEAD and index + len(ahead) < stop:
            ahead.append(target.generator.generate(seed, index + len(ahead), [impl]))
        item = ahead.popleft()
        if state is not None:
            mark(state, index)
        outcome = guarded_check(target, item, impl, device, tuple(ahead))
        tally.add(outcome, index)
        new = outcome.divergence is not None and outcome.divergence.signature not in seen
        seen.update([outcome.divergence.signature] if new else [])
        if report and (new or time.perf_counter() - began >= report_every):
            tally.seconds, began = time.perf_counter() - began, time.perf_counter()
            report(("progress", spec, tally))
            total.merge(tally)
            tally = Tally()
        if not keep_going and (total.divergence or tally.divergence):
            break
    tally.seconds = time.perf_counter() - began
    if report:
        report(("done", spec, tally))
    total.merge(tally)
    return total


class SeededRun:
    """One run: a tally per implementation, filled by workers, as `options` say.

    Its results do not depend on `--jobs`: an implementation's counts are those of the inputs up
    to its first divergence (the lowest index found), as one worker checking them in order would
    count them. Chunks are handed out index-major, so every chunk below that index has been
    handed out by the time it is found and runs to its end; a chunk above it that was already
    running is not counted. The inputs a dead worker had checked but not yet reported are
    checked again by another worker (`redo`), not left out. With `keep_going` every chunk runs
    to its end (after a dead worker's input, the rest of its chunk is handed out again), every
    input is counted, and each signature's finding is its lowest input: the same whichever
    worker checked what."""

    def __init__(self, target, impls: list, options: RunOptions, out,
                 on_found=lambda name, d: None):
        self.target, self.options, self.on_found = target.alone(options.profile), options, \
            on_found
        self.timeout = options.timeout
        self.impls = {impl.name: impl for impl in impls}
        self.tallies = {name: Tally() for name in self.impls}
        self.chunk_tallies: dict[tuple, Tally] = {}  # (spec, lo, hi) -> what it reported
        self.redo: list[tuple] = []  # (spec, lo, hi) a dead worker had not reported
        self.progress = Progress(target, self.tallies, options.cases * len(impls), out)
        self.tasks: dict[Worker, tuple] = {}  # the chunk each busy worker runs

    def chunks(self):
        """(spec, start, stop), index-major: a lower chunk is always handed out before a higher."""
        low, high = self.target.settings.chunk_sizes
        first, stop = self.options.start, self.options.start + self.options.cases
        size = max(low, min(high, self.options.cases // max(1, 8 * self.options.jobs)))
        for lo in range(first, stop, size):
            for spec in self.tallies:
                yield spec, lo, min(lo + size, stop), REPORT_EVERY

    def run(self) -> None:
        """Fill the tallies; on KeyboardInterrupt they stay as far as they got, with every
        result a worker had already sent taken in (a divergence among them is saved)."""
        pending, workers = self.chunks(), []
        try:
            workers += [self._worker() for _ in range(self.options.jobs)]
            idle = list(workers)
            while True:
                for worker in idle:
                    self._hand_out(worker, pending)
                if not self.tasks:
                    break
                ready = wait_any(list(self.tasks), 0.2)  # where a stop signal lands, mostly
                with held():  # a result taken from a pipe is recorded, a finding saved
                    idle = [w for w in ready if self._settle(w)]
                    idle += self._timed_out()
                    idle = [self._replace(w, workers) if w.dead() else w for w in idle]
                    idle += [w for w in workers if w not in self.tasks and w not in idle]
                self.progress.tick()
        except KeyboardInterrupt:
            with held():
                for worker in list(self.tasks):
                    self._settle(worker, lose_dead=False)
            raise
        finally:
            for worker in workers:
                worker.stop()
            self.progress.finish()

    def _wanted(self, spec: str, lo: int) -> bool:
        """Whether inputs from `lo` on still count for `spec` (none past its first divergence,
        unless the run keeps going)."""
        tally = self.tallies[spec]
        return self.options.keep_going or tally.divergence is None or lo < tally.at

    def _hand_out(self, worker: Worker, pending) -> None:
        redo = [task for task in self.redo if self._wanted(task[0], task[1])]
        for task in redo[:1] or pending:
            spec, lo, hi, every = task
            if self._wanted(spec, lo):
                if task in self.redo:  # (redo may hold unwanted tasks while pending serves)
                    self.redo.remove(task)
                self.tasks[worker] = task
                worker.give(("call", run_chunk, (self.target.name, self.impls[spec],
                                                 self.options.seed, lo, hi, self.options.device,
                                                 every, self.options.keep_going,
                                                 self.options.profile)), lo)
                return

    def _settle(self, worker: Worker, lose_dead: bool = True) -> bool:
        """Take the worker's messages; True when its chunk is over (done, or it died: then the
        input it was on is its divergence, unless `lose_dead` is false). A message that is
        not one (`frames.py`) ends the worker: the divergence of the implementation it ran."""
        dead = worker.dead()  # before reading: all it wrote before dying is read
        try:
            messages = worker.reader.messages()
            if not dead and worker.reader.stalled(self.timeout):
                raise ProtocolError("a message begun and never finished")
            for message in messages:
                _check_message(message)
        except ProtocolError as error:
            worker.stop()
            self._lost(worker, f"corrupted the worker protocol: {error}", "protocol")
            return True
        for kind, *body in messages:
            if kind in ("error", "usage"):
                raise_from_worker(kind, body[0])
            self._absorb(self.tasks[worker], body[1])
            if kind == "done":
                del self.tasks[worker]
                return True
        if lose_dead and dead:
            worker.process.join()
            self._lost(worker, *death(worker.process.exitcode))
            return True
        return False

    def _timed_out(self) -> list[Worker]:
        late = [w for w in self.tasks if (w.busy_since() or time.monotonic()) +
                self.timeout + JUDGE_MARGIN < time.monotonic()]
        for worker in late:
            worker.stop()
            self._lost(worker, *late_what(worker, self.timeout))
        return late

    def _lost(self, worker: Worker, what: str, kind: str) -> None:
        """The worker died (or was killed) checking an input: that is the divergence. The
        inputs of its chunk before that one that it had not reported yet are checked again.

        A corrupted pipe (`frames.py`) is seen at the next message, maybe inputs after the one
        that wrote to it: the unreported inputs are checked again, one message per input,
        and the first one after the last good message is then the divergence."""
        task = self.tasks.pop(worker)
        spec, lo, hi, every = task
        reported_up_to = lo + (self.chunk_tallies[task].cases if task in self.chunk_tallies
                               else 0)
        index = worker.current()
        if kind == "protocol":
            if every > 0:
                self.redo.append((spec, reported_up_to, min(index + 1, hi), 0.0))
                return
            index = reported_up_to
        elif reported_up_to < index:
            self.redo.append((spec, reported_up_to, index, REPORT_EVERY))
        if self.options.keep_going and index + 1 < hi:  # the inputs after the one it died on
            self.redo.append((spec, index + 1, hi, REPORT_EVERY))
        item = self.target.generator.generate(self.options.seed, index, [self.impls[spec]])
        tally = Tally()
        tally.add(crash_outcome(self.target, item, self.impls[spec], what, kind), index)
        self._absorb(task, tally)

    def _absorb(self, task: tuple, tally: Tally) -> None:
        spec = task[0]
        self.chunk_tallies.setdefault(task, Tally()).merge(tally)
        before = {id(found) for found in self.tallies[spec].found()}
        self._recount(spec)
        for found in self.tallies[spec].found():  # a new signature, or a lower input of one
            if id(found) not in before:
                self.on_found(spec, found)
        self.progress.tick()

    def _recount(self, spec: str) -> None:
        """`spec`'s tally: its chunks up to its first divergence (every chunk, when the run
        keeps going)."""
        chunks = [(task[1], tally) for task, tally in self.chunk_tallies.items()
                  if task[0] == spec]
        diverged = [tally.at for _, tally in chunks if tally.divergence is not None]
        cut = None if self.options.keep_going else min(diverged, default=None)
        total = Tally()
        for lo, tally in sorted(chunks, key=lambda chunk: chunk[0]):
            if cut is None or lo <= cut:
                total.merge(tally)
        if not self.options.keep_going:
            total.only_first()
        self.tallies[spec] = total

    def _worker(self) -> Worker:
        return Worker(self.options.timeout, self.options.memory)

    def _replace(self, worker: Worker, workers: list) -> Worker:
        worker.stop()
        workers[workers.index(worker)] = fresh = self._worker()
        sweep(keep=[w.process.pid for w in workers])  # what the dead one left running
        return fresh


def _check_message(message: tuple) -> None:
    """A worker's message is one `run_chunk` or `_serve` sends: ("progress" | "done", name,
    Tally) or ("error" | "usage", text)."""
    kind = message[0]
    if kind in ("progress", "done"):
        if len(message) == 3 and isinstance(message[2], Tally):
            return
    elif kind in ("error", "usage") and len(message) == 2 and isinstance(message[1], str):
        return
    raise ProtocolError(f"a message of kind {kind[:40]!r} and {len(message)} part(s)")


class Progress:
    """A status line every second on a terminal, every ten seconds in a log."""

    def __init__(self, target, tallies: dict, total: int, out):
        self.name, self.unit, self.tallies, self.total, self.out = \
            target.name, target.codec.noun + "s", tallies, total, out
        self.began = self.last = time.monotonic()
        self.tty = hasattr(out, "isatty") and out.isatty()
        self.every = 1.0 if self.tty else 10.0

    def line(self) -> str:
        done = sum(t.cases for t in self.tallies.values())
        diverged = sum(t.divergence is not None for t in self.tallies.values())
        findings = sum(len(t.findings) for t in self.tallies.values())
        rate = rate_text(done, time.monotonic() - self.began)
        return (f"{self.name}: {done:,}/{self.total:,} {self.unit}, {rate}/s, "
                f"{diverged} implementation(s) diverged"
                + (f", {findings} distinct finding(s)" if findings > diverged else ""))

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(self.line(), end="\r" if self.tty else "\n", file=self.out, flush=True)

    def finish(self) -> None:
        if self.tty:
            print(" " * 80, end="\r", file=self.out)
