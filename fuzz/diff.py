"""`kvfuzz diff [TARGET]`: seeded inputs through implementations and the oracle (`run.py`).

Each implementation's first divergence, and one example of each known upstream difference, is
saved to the corpus the moment it arrives; when the run ends it is shrunk (in a supervised
worker too: a crash may crash again) and the shrunk input replaces the one first saved. Ctrl-C
and SIGTERM stop the run alike: what was found stays saved, and the summary prints.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kvfuzz.fuzz import corpus
from kvfuzz.fuzz.isolation import Checker, sigterm_as_interrupt
from kvfuzz.fuzz.run import SeededRun
from kvfuzz.fuzz.shrink import shrink
from kvfuzz.fuzz.summary import summary
from kvfuzz.fuzz.targets import TARGETS

INTERRUPTED = 130


def diff_command(args, out=None) -> int:
    """Exit status: 0 all agree, 1 a divergence (saved and reported), 130 interrupted."""
    out = out or sys.stderr  # looked up now: a test may have replaced it
    names = list(TARGETS) if args.target == "all" else [args.target]
    # Resolve every --impl of every target first: a typo fails in one line before any run.
    runs = [(TARGETS[name], [TARGETS[name].resolve(spec).name for spec in args.impl]
             or [impl.name for impl in TARGETS[name].bundled()]) for name in names]
    status = 0
    with sigterm_as_interrupt():
        for target, specs in runs:
            cases = args.cases or target.default_cases
            status = max(status, diff_target(target, specs, argparse.Namespace(
                **{**vars(args), "cases": cases}), out))
            if status == INTERRUPTED:  # Ctrl-C stops the whole run, not only this target
                break
    return status


def diff_target(target, specs: list[str], args, out) -> int:
    saved: dict[int, tuple[str, bool]] = {}  # id(divergence) -> (path, created by this run)

    def save_now(spec, divergence):
        path = Path(args.corpus) / divergence.file_name()
        existed = path.exists()
        saved[id(divergence)] = (corpus.save_or_print(target, divergence.input, args.corpus,
                                                      out), not existed)
        print(f"found: {divergence.headline()}\n  saved {saved[id(divergence)][0]}", file=out)

    seeded = SeededRun(target, specs, args, out, on_found=save_now)
    began, status = time.monotonic(), INTERRUPTED
    try:
        seeded.run()
        status = finish(target, seeded.tallies, args, out, saved, save_now)
    except KeyboardInterrupt:
        pass
    print(summary(target, seeded.tallies, time.monotonic() - began,
                  status == INTERRUPTED), file=out)
    return status


def finish(target, tallies: dict, args, out, saved: dict, save_now) -> int:
    """Shrink each implementation's divergence and one example per known upstream difference,
    save the shrunk input in place of the first one, print the reports; the exit status (known
    differences are not failures)."""
    status, checker = 0, Checker(args.timeout)
    try:
        for spec, tally in tallies.items():
            found = ([tally.divergence] if tally.divergence else []) + list(tally.examples.values())
            for divergence in found:
                if id(divergence) not in saved:  # known differences are saved here
                    save_now(spec, divergence)
                status = max(status, 0 if divergence.known else 1)
                small = shrink(target, divergence, args.device, check=checker.check)
                path, created = saved[id(divergence)]
                small.saved_path = corpus.save_or_print(target, small.input, args.corpus, out)
                if created and small.saved_path != path:
                    Path(path).unlink(missing_ok=True)  # the shrunk input replaces it
                print(small.report(), file=out)
    finally:
        checker.close()
    return status
