"""`kvfuzz diff [TARGET]`: seeded inputs through implementations and the oracle (`run.py`).

Each implementation's first divergence, and one example of each known upstream difference, is
saved to the corpus the moment it arrives; when the run ends it is shrunk (in a supervised
worker too: a crash may crash again) and the shrunk input replaces the one first saved. Ctrl-C
and SIGTERM stop the run alike: what was found stays saved, and the summary prints.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvfuzz.fuzz import corpus
from kvfuzz.fuzz.isolation import Checker
from kvfuzz.fuzz.run import RunOptions, SeededRun
from kvfuzz.fuzz.shrink import shrink
from kvfuzz.fuzz.stop_signals import INTERRUPTED, held, interrupting
from kvfuzz.fuzz.summary import summary
from kvfuzz.fuzz.targets import TARGETS



def diff_command(args, out=None) -> int:
    """Exit status: 0 all agree, 1 a divergence (saved and reported), 130 interrupted."""
    out = out or sys.stderr  # looked up now: a test may have replaced it
    names = list(TARGETS) if args.target == "all" else [args.target]
    # Resolve every --impl of every target first: a typo fails in one line before any run.
    # A target named on its own with nothing to run (its packages missing) is a usage error;
    # among every target it is said and skipped below.
    default = "bundled" if args.target == "all" else "bundled_or_error"
    runs = [(TARGETS[name], [TARGETS[name].resolve(spec) for spec in args.impl]
             or getattr(TARGETS[name], default)()) for name in names]
    status = 0
    with interrupting():
        for target, impls in runs:
            if not impls:  # every target: one whose packages are missing is said, not failed
                print(f"{target.name}: not run: {target.not_run_reason()}", file=out)
                continue
            options = RunOptions(args.cases or target.default_cases, args.seed, args.start,
                                 args.jobs, args.device, args.timeout, args.corpus)
            status = max(status, diff_target(target, impls, options, out))
            if status == INTERRUPTED:  # Ctrl-C stops the whole run, not only this target
                break
    return status


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
        return 1 if any(not d.known for d in self.divergences) else 0


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
        for divergence in ([tally.divergence] if tally.divergence else []) + \
                list(tally.examples.values()):
            if divergence.signature not in done and id(divergence) in saved:
                divergence.saved_path = saved[id(divergence)][0]
                result.divergences.append(divergence)


def _shrink_all(target, result: DiffResult, options, out, saved: dict, save_now) -> None:
    """Each implementation's divergence and one example per known upstream difference."""
    checker = Checker(options.timeout)
    try:
        for name, tally in result.tallies.items():
            found = ([tally.divergence] if tally.divergence else []) + list(tally.examples.values())
            for divergence in found:
                if id(divergence) not in saved:  # known differences are saved here
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
