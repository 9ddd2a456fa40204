"""What every atheris target runs per input: decode the bytes, check every implementation, count
features, and on a new failure save the input and raise.

Configured by environment (libFuzzer owns argv), all optional:
  KVFUZZ_IMPL   comma-separated implementations (names or module:attr; default: the target's)
  KVFUZZ_FOUND  directory a failing input is saved to before raising (default: corpus)
  KVFUZZ_KNOWN  file of signatures already found (JSON lines): those are counted, not raised,
                so a campaign keeps searching past a bug it already has
  KVFUZZ_STATS  directory for this process's counters (read by `kvfuzz fuzz` for status lines)
  KVFUZZ_FEATURES=0  no allocator-state features: coverage alone guides libFuzzer (the
                detection benchmark's "atheris-plain" strategy)
  KVFUZZ_INFLIGHT  file the input being checked is written to (`inflight.py`)
  KVFUZZ_MEMORY  bytes (--memory): what an implementation's raise of MemoryError reports
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.campaign.features import Features
from kvfuzz.fuzz.campaign.inflight import InFlightWriter
from kvfuzz.fuzz.campaign.judge import ApartJudge
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY
from kvfuzz.fuzz.engine.isolation import guarded_check
from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.fuzz.engine.target import DIVERGE, warm_up

STATS_EVERY = 2.0  # seconds


def impl_specs() -> list[str]:
    return [spec for spec in os.environ.get("KVFUZZ_IMPL", "").split(",") if spec]


def signature_text(signature) -> str:
    return json.dumps([str(part) for part in signature])


class Harness:
    """Counters and the known-signature list shared by every atheris target."""

    def __init__(self, name: str):
        self.name = name
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
        self.began: float | None = None  # wall time of the first input
        self.stopped = False  # SIGINT came: the campaign is stopping this worker
        self._watch_stop_signal()

    def _watch_stop_signal(self) -> None:
        """`kvfuzz fuzz` stops its workers with SIGINT, which Python raises as KeyboardInterrupt
        wherever the worker is: inside an implementation's call too, where `guarded_check` would
        report it as that implementation's own KeyboardInterrupt (a bogus finding, seen on the
        slower vLLM targets). The handler raises it as before and notes that it came from
        outside. Only in an atheris worker, and left alone when something else owns SIGINT."""
        if ("atheris" not in sys.modules
                or threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            return

        def on_sigint(signum, frame):
            self.stopped = True
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, on_sigint)

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
        self.began = self.began or time.time()
        self.execs += 1
        # Every STATS_EVERY seconds, and at each power of two: libFuzzer ends a worker (its
        # -runs, -max_total_time) with C's exit, which runs no Python, so whatever came after
        # the last write is not counted; the powers bring a short run's count within half.
        if self.stats_path is not None and (time.monotonic() - self._written >= STATS_EVERY
                                            or self.execs & (self.execs - 1) == 0):
            self.write_stats()

    def write_stats(self) -> None:
        self._written = time.monotonic()
        data = {"execs": self.execs, "features": self.counts, "failures": self.failures,
                "began": self.began, "time": time.time()}
        corpus.write_atomic(self.stats_path, json.dumps(data))

    def failed(self, signature: str) -> bool:
        """Count a failure; True when it is new, and then the counters are written at once
        (the process is about to raise and exit)."""
        self.failures[signature] += 1
        if self.is_known(signature):
            return False
        if self.stats_path is not None:
            self.write_stats()
        return True


class DifferentialHarness(Harness):
    """Every chosen implementation of a target against the oracle on each decoded input. With
    `apart` (an atheris worker), judged by a process forked before any implementation is
    imported (`judge.py`); else here (a test's harness)."""

    def __init__(self, target, apart: bool = False):
        super().__init__(target.name)
        self.target = target
        memory = int(os.environ.get("KVFUZZ_MEMORY", DEFAULT_MEMORY))
        # Forked first: resolving an outside implementation imports its module here.
        self.judge = ApartJudge(target, memory) if apart else None
        specs = impl_specs() or target.catalogue.fuzzed_by_default()
        self.impls = [target.catalogue.resolve(spec) for spec in specs]
        for impl in self.impls:
            warm_up(target, impl.load())  # imported now, so that coverage instrumentation sees it
        use_features = os.environ.get("KVFUZZ_FEATURES", "1") != "0"
        self.features = Features(target.judge.feature_names() if use_features else [])
        self.in_flight = InFlightWriter()

    def test_one_input(self, data: bytes) -> None:
        # Cleared when the input is done, whether it passed or raised: what is left there when
        # the worker is gone is the input that ended it (an `os._exit`, a hang).
        self.in_flight.begin(data)
        try:
            self._check(data)
        finally:
            self.in_flight.end()

    def _check(self, data: bytes) -> None:
        self.began = self.began or time.time()
        item = self.target.generator.from_bytes(data, self.impls)
        # libFuzzer owns SIGINT in a worker: a KeyboardInterrupt here is the implementation's.
        outcomes = [self.judge.check(self.target, item, impl) if self.judge else
                    guarded_check(self.target, item, impl, "cpu") for impl in self.impls]
        if self.stopped:  # the interrupt was the campaign's, whatever the outcomes say
            raise KeyboardInterrupt
        found = self.target.judge.fuzz_features(item, outcomes)
        self.counts.update(found)
        self.features.touch(found)
        for outcome in outcomes:
            if outcome.status == DIVERGE and self.failed(signature_text(
                    outcome.divergence.signature)):
                outcome.divergence.saved_path = str(corpus.save(self.target, item,
                                                                self.found_dir))
                raise Mismatch(outcome.divergence)
        self.done_one()
