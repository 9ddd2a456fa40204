"""What every atheris target runs per input: decode, check, count features, save and raise.

Configured by environment (libFuzzer owns argv), all optional:
  KVFUZZ_IMPL   comma-separated implementations (names or module:attr; default: every bundled)
  KVFUZZ_FOUND  directory a failing case is saved to before raising (default: corpus)
  KVFUZZ_KNOWN  file of signatures already found (JSON lines): those are counted, not raised,
                so a campaign keeps searching past a bug it already has
  KVFUZZ_STATS  directory for this process's counters (read by `kvfuzz fuzz` for status lines)
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from kvfuzz.fuzz import corpus, features
from kvfuzz.strategies.paged.bytes_chooser import decode
from kvfuzz.fuzz.engine import DIVERGE, check
from kvfuzz.fuzz.report import Mismatch

STATS_EVERY = 2.0  # seconds
_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1}


def write_atomic(path: Path, content: str | bytes) -> None:
    temporary = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    if isinstance(content, str):
        content = content.encode()
    temporary.write_bytes(content)
    os.replace(temporary, path)


@contextmanager
def signals_held():
    """Hold Ctrl-C / SIGTERM (and libFuzzer's own handlers) until a file write is complete."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class Harness:
    """Counters and the known-signature list shared by every target."""

    def __init__(self, target: str):
        self.target = target
        self.found_dir = Path(os.environ.get("KVFUZZ_FOUND", corpus.DEFAULT_DIR))
        self.known_path = os.environ.get("KVFUZZ_KNOWN")
        stats_dir = os.environ.get("KVFUZZ_STATS")
        self.stats_path = Path(stats_dir) / f"stats-{os.getpid()}.json" if stats_dir else None
        self.execs = 0
        self.counts: Counter = Counter()     # features seen, for the status line
        self.failures: Counter = Counter()   # signature text -> times seen
        self._known: set[str] = set()
        self._known_stamp = None
        self._written = time.monotonic()

    def is_known(self, signature: str) -> bool:
        if self.known_path:
            try:
                stamp = os.stat(self.known_path).st_mtime_ns
            except OSError:
                stamp = None
            if stamp != self._known_stamp:
                self._known_stamp = stamp
                text = Path(self.known_path).read_text() if stamp else ""
                self._known = {line for line in text.splitlines() if line}
        return signature in self._known

    def done_one(self) -> None:
        self.execs += 1
        if self.stats_path is not None and time.monotonic() - self._written >= STATS_EVERY:
            self.write_stats()

    def write_stats(self) -> None:
        self._written = time.monotonic()
        data = {"execs": self.execs, "features": self.counts, "failures": self.failures}
        with signals_held():
            write_atomic(self.stats_path, json.dumps(data))

    def failed(self, signature: str) -> bool:
        """Count a failure; True when it is new, and then the counters are written at once
        (the process is about to raise and exit)."""
        self.failures[signature] += 1
        if self.is_known(signature):
            return False
        if self.stats_path is not None:
            self.write_stats()
        return True


def signature_text(signature) -> str:
    return json.dumps(list(signature))


class PagedHarness(Harness):
    """extend / decode: every chosen implementation against the oracle on each decoded case."""

    def __init__(self, target: str):
        super().__init__(target)
        from kvfuzz.impl.registry import BUNDLED, implementations, resolve

        specs = [s for s in os.environ.get("KVFUZZ_IMPL", "").split(",") if s]
        chosen = [resolve(target, s) for s in specs] or implementations(target, BUNDLED)
        self.impls = [(impl, impl.load()) for impl in chosen]

    def test_one_input(self, data: bytes) -> None:
        case = decode(data, self.target)
        for name, times in features.case_features(case).items():
            features.touch(name, times)
            self.counts[name] += 1
        for impl, fn in self.impls:
            outcome = check(impl, fn, case)
            for name in features.outcome_features(outcome):
                features.touch(name)
            if outcome.status == DIVERGE:
                self._diverged(outcome.divergence)
        self.done_one()

    def _diverged(self, divergence) -> None:
        if not self.failed(signature_text(divergence.signature())):
            return
        with signals_held():  # the case is on disk, whole, before anything can stop us
            divergence.saved_path = str(corpus.save(divergence.case, self.found_dir))
        raise Mismatch(divergence)
