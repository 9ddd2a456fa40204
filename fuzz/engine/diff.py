"""The seeded differential behind `kvfuzz diff` and `kvfuzz.diff`: seeded inputs through
implementations and the oracle (`run.py`).

Each implementation's first divergence (with `keep_going`: the first input of each distinct
divergence signature) is saved to the corpus the moment it arrives; when the run ends it is
shrunk (in a supervised worker too: a crash may crash again) and the shrunk input replaces the one
first saved. Ctrl-C and SIGTERM stop the run alike: what was found stays saved, and the summary
prints."""

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
    print(summary(target, result.tallies, time.monotonic() - began, result.interrupted,
                  options.keep_going), file=out)
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


class Saved:
    """The corpus files this run's reports name, each report by its key (`finding_key`). Files
    are only ever added, except one this run created that no report names any more (the first
    find of a divergence that a lower input or a shrink has since replaced): two reports on the
    same input share its file, and neither's shrink removes what the other's report names."""

    def __init__(self, target, directory, out):
        self.target, self.directory, self.out = target, directory, out
        self.created: set[str] = set()
        self.naming: dict[str, set[str]] = {}  # path -> the implementations whose report names it
        self.current: dict[str, str] = {}      # implementation -> the path its report names

    def save(self, name, item) -> str:
        """`item` saved for report `name`, in place of what it named before."""
        existed = (Path(self.directory) / self.target.file_name(item)).exists()
        path = corpus.save_or_print(self.target, item, self.directory, self.out)
        if not existed and Path(path).exists():
            self.created.add(path)
        self.naming.setdefault(path, set()).add(name)
        previous, self.current[name] = self.current.get(name), path
        if previous is not None and previous != path:
            self._release(name, previous)
        return path

    def _release(self, name, path: str) -> None:
        self.naming[path].discard(name)
        if not self.naming[path] and path in self.created:
            Path(path).unlink(missing_ok=True)


def finding_key(divergence, keep_going: bool):
    """What one report of a run stands for: its implementation (the run stops at its first
    divergence), or with `keep_going` its signature (which names the implementation too)."""
    return divergence.signature if keep_going else divergence.impl


def run_diff(target, impls: list, options: RunOptions, out) -> DiffResult:
    """Seeded inputs through `impls` in supervised workers; each finding saved as found (when
    `options.corpus` is set), then shrunk, the shrunk input replacing the first one."""
    saved = Saved(target, options.corpus, out) if options.corpus is not None else None
    found: dict = {}  # finding_key -> its divergence on record

    def save_now(name, divergence):
        key = finding_key(divergence, options.keep_going)
        with held():  # a stop signal waits until the finding is on disk
            found[key] = divergence
            if saved is not None:
                divergence.saved_path = saved.save(key, divergence.saved_input())
            print(f"found: {divergence.headline()}"
                  + (f"\n  saved {divergence.saved_path}" if saved else ""), file=out)

    seeded = SeededRun(target, impls, options, out, on_found=save_now)
    result = DiffResult(seeded.tallies)
    try:
        seeded.run()
        _shrink_all(target, result, options, out, found, saved, save_now)
    except KeyboardInterrupt:
        result.interrupted = True
        _report_unshrunk(result, found, options.keep_going)
    return result


def _report_unshrunk(result: DiffResult, found: dict, keep_going: bool) -> None:
    """After a stop: the findings not shrunk yet are reported as first found (and saved)."""
    done = {finding_key(small, keep_going) for small in result.divergences}
    for tally in result.tallies.values():
        for divergence in tally.found():
            key = finding_key(divergence, keep_going)
            if key not in done and found.get(key) is divergence:
                result.divergences.append(divergence)


def _shrink_all(target, result: DiffResult, options, out, found: dict, saved, save_now) -> None:
    """Each finding, shrunk."""
    checker = Checker(options.timeout, options.memory)
    try:
        for name, tally in result.tallies.items():
            for divergence in tally.found():
                key = finding_key(divergence, options.keep_going)
                if found.get(key) is not divergence:
                    save_now(name, divergence)
                print(f"shrinking: {divergence.headline()}", file=out, flush=True)
                small = shrink(target, divergence, options.device, check=checker.check)
                with held():  # the shrunk input replaces the first one, whole
                    if saved is not None:
                        small.saved_path = saved.save(key, small.saved_input())
                    result.divergences.append(small)
    finally:
        checker.close()
