"""The seeded differential behind `kvfuzz diff` and `kvfuzz.diff`: seeded inputs through
implementations and the oracle (`run.py`).

Each implementation's first divergence is saved to the corpus the moment it arrives; when the run
ends it is shrunk (in a supervised worker too: a crash may crash again) and the shrunk input
replaces the one first saved. Ctrl-C and SIGTERM stop the run alike: what was found stays saved, and
the summary prints."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.isolation import Checker
from kvfuzz.fuzz.engine.run import RunOptions, SeededRun
from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.fuzz.engine.stop_signals import INTERRUPTED, held
from kvfuzz.fuzz.engine.summary import summary


def diff_target(target, impls: list, options: RunOptions, out) -> int:
    """One target's run, printed: what is found as it is found, reports, the summary."""
    began = time.monotonic()
    result = run_diff(target, impls, options, out)
    for divergence in result.divergences:
        print(divergence.report(), file=out)
    print(summary(target, result.tallies, time.monotonic() - began, result.interrupted),
          file=out)
    return result.status


@dataclass
class DiffResult:
    """What a seeded run found: the tallies per implementation and each divergence, shrunk,
    with `saved_path` where a corpus was given."""

    tallies: dict
    divergences: list = field(default_factory=list)
    interrupted: bool = False

    @property
    def status(self) -> int:
        if self.interrupted:
            return INTERRUPTED
        return 1 if self.divergences else 0


def run_diff(target, impls: list, options: RunOptions, out) -> DiffResult:
    """Seeded inputs through `impls` in supervised workers; each divergence saved as found
    (when `options.corpus` is set), then shrunk, the shrunk input replacing the first one."""
    saved: dict[int, tuple[str | None, bool]] = {}  # id(divergence) -> (path, created here)

    def save_now(name, divergence):
        with held():  # a stop signal waits until the finding is on disk
            saved[id(divergence)] = (None, False)
            if options.corpus is not None:
                existed = (Path(options.corpus) / divergence.file_name()).exists()
                saved[id(divergence)] = (corpus.save_or_print(target, divergence.input,
                                                              options.corpus, out), not existed)
            print(f"found: {divergence.headline()}"
                  + (f"\n  saved {saved[id(divergence)][0]}" if options.corpus else ""), file=out)

    seeded = SeededRun(target, impls, options, out, on_found=save_now)
    result = DiffResult(seeded.tallies)
    try:
        seeded.run()
        _shrink_all(target, result, options, out, saved, save_now)
    except KeyboardInterrupt:
        result.interrupted = True
        _report_unshrunk(result, saved)
    return result


def _report_unshrunk(result: DiffResult, saved: dict) -> None:
    """After a stop: the divergences not shrunk yet are reported as first found (and saved)."""
    done = {small.signature for small in result.divergences}
    for tally in result.tallies.values():
        divergence = tally.divergence
        if divergence and divergence.signature not in done and id(divergence) in saved:
            divergence.saved_path = saved[id(divergence)][0]
            result.divergences.append(divergence)


def _shrink_all(target, result: DiffResult, options, out, saved: dict, save_now) -> None:
    """Each implementation's divergence, shrunk."""
    checker = Checker(options.timeout)
    try:
        for name, tally in result.tallies.items():
            divergence = tally.divergence
            if divergence is None:
                continue
            if id(divergence) not in saved:
                save_now(name, divergence)
            print(f"shrinking: {divergence.headline()}", file=out, flush=True)
            small = shrink(target, divergence, options.device, check=checker.check)
            path, created = saved[id(divergence)]
            with held():  # the shrunk input replaces the first one, whole
                if options.corpus is not None:
                    small.saved_path = corpus.save_or_print(target, small.input,
                                                            options.corpus, out)
                    if created and small.saved_path != path:
                        Path(path).unlink(missing_ok=True)
                result.divergences.append(small)
    finally:
        checker.close()
