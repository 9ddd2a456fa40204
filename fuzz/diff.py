"""`kvfuzz diff [TARGET]`: seeded inputs through implementations and the oracle (`run.py`); each
implementation's first divergence, and one example of each known upstream difference, is shrunk,
saved to the corpus and reported; the summary counts every outcome."""

from __future__ import annotations

import argparse
import sys
import time

from kvfuzz.fuzz import corpus
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
    for target, specs in runs:
        cases = args.cases or target.default_cases
        status = max(status, diff_target(target, specs, argparse.Namespace(
            **{**vars(args), "cases": cases}), out))
        if status == INTERRUPTED:  # Ctrl-C stops the whole run, not only the current target
            break
    return status


def diff_target(target, specs: list[str], args, out) -> int:
    seeded = SeededRun(target, specs, args, out)
    began = time.monotonic()
    try:
        seeded.run()
        status = finish(target, seeded.tallies, args, out)
    except KeyboardInterrupt:
        print(summary(target, seeded.tallies, time.monotonic() - began, True), file=out)
        return INTERRUPTED
    print(summary(target, seeded.tallies, time.monotonic() - began), file=out)
    return status


def finish(target, tallies: dict, args, out) -> int:
    """Shrink, save and print each implementation's divergence and one example per known
    upstream difference; returns the exit status (known differences are not failures)."""
    status = 0
    for tally in tallies.values():
        found = ([tally.divergence] if tally.divergence else []) + list(tally.examples.values())
        for divergence in found:
            status = max(status, 0 if divergence.known else 1)
            small = shrink(target, divergence, args.device)
            small.saved_path = str(corpus.save(target, small.input, args.corpus))
            print(small.report(), file=out)
    return status
