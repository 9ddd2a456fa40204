"""`kvfuzz fuzz TARGET`: a coverage-guided campaign of parallel atheris workers.

Work directory (default .kvfuzz/<target>, gitignored): bytes/ (libFuzzer's working corpus, seeded
from the JSON corpus through the target's encoder), found/ (raw cases the workers saved before
raising), stats/ (per-process counters), logs/, artifacts/ (libFuzzer crash files), known.txt
(signatures already found: workers count them instead of stopping on them). A found case is
shrunk and saved once per signature; Ctrl-C or SIGTERM stops the workers, keeps every found
case (shrinking what time allows) and prints the summary.

A worker that ends while checking an input, whatever its exit status (a segfault, an abort,
`os._exit(0)`), or whose input runs past --timeout (timed here: libFuzzer's own `-timeout` needs
SIGALRM, which an implementation can take over), has that input read from its in-flight file
(`inflight.py`); libFuzzer's crash files are read too. Either way the bytes are decoded to an
input, re-run in a supervised process and saved like any finding, and the worker is restarted.
Workers die with the supervisor, whatever kills it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kvfuzz.fuzz.campaign.inflight import ENV as IN_FLIGHT_ENV, read_in_flight
from kvfuzz.fuzz.campaign.specs import REPO, Finding
from kvfuzz.fuzz.campaign.summary import edge_coverage, summary
from kvfuzz.fuzz.engine.corpus import write_atomic
from kvfuzz.fuzz.engine.apart import die_with_parent
from kvfuzz.fuzz.engine.containment import kill_tree, sweep
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY
from kvfuzz.fuzz.engine.isolation import DEFAULT_TIMEOUT, Checker
from kvfuzz.fuzz.engine.stop_signals import INTERRUPTED, handling

STATUS_EVERY = 5.0
LIBFUZZER_TIMEOUT = 86400  # seconds: never reached (see `_start_worker`)
MAX_BLIND_CRASHES = 3  # worker crashes that saved nothing: a harness bug, stop restarting


class Campaign:
    def __init__(self, target, impl_specs, seconds: float, jobs: int, corpus_dir,
                 work_dir, flags=(), out=sys.stderr, timeout: float = DEFAULT_TIMEOUT,
                 memory: int = DEFAULT_MEMORY):
        self.target, self.impl_specs, self.seconds, self.jobs = target, impl_specs, seconds, jobs
        self.timeout, self.memory, self.checker = timeout, memory, Checker(timeout, memory)
        # Absolute: the workers run inside the work directory, where a relative path breaks.
        self.corpus_dir, self.work = Path(corpus_dir).resolve(), Path(work_dir).resolve()
        self.flags, self.out = list(flags), out
        self.dirs = {name: self.work / name for name in ("bytes", "found", "stats", "logs",
                                                         "artifacts", "failures", "inflight")}
        self.known_path = self.work / "known.txt"
        self.findings: dict[str, tuple[Finding, Path]] = {}
        self.preexisting: list[str] = []
        self.triaged: set[str] = set()
        self.blind_crashes = 0
        self.ended_by_input = 0  # workers that ended (or hung) inside an input
        self.stopping = self.interrupted = False
        self.workers: dict[int, subprocess.Popen] = {}
        self.started: dict[int, float] = {}

    # -- setup -------------------------------------------------------------------------------
    def prepare(self) -> int:
        for directory in self.dirs.values():
            directory.mkdir(parents=True, exist_ok=True)
            for stale in directory.glob(".tmp-*"):
                stale.unlink()
        for old in self.dirs["stats"].glob("*.json"):
            old.unlink()
        seeded = 0
        for data in self.target.seeds([str(self.corpus_dir), str(REPO / "corpus")]):
            name = self.dirs["bytes"] / hashlib.sha1(data).hexdigest()
            if not name.exists():
                write_atomic(name, data)
                seeded += 1
        self._known_from_corpus()
        return seeded

    def _known_from_corpus(self) -> None:
        """Bugs the corpus already holds a case for are known from the start, not re-reported."""
        known = set()
        if self.target.output == "corpus" and self.corpus_dir.is_dir():
            for path in sorted(self.corpus_dir.glob(f"{self.target.name}-*.json")):
                if self.stopping:  # interrupted while reading the corpus: no campaign follows
                    break
                for finding in self.target.triage(path, self.impl_specs, lambda: True,
                                                  self.checker):
                    if finding.signature not in known:
                        self.preexisting.append(f"{finding.signature}  {path}")
                    known.add(finding.signature)
        write_atomic(self.known_path, "".join(f"{s}\n" for s in sorted(known)))

    # -- workers -----------------------------------------------------------------------------
    def _in_flight_path(self, slot: int) -> Path:
        return self.dirs["inflight"] / f"worker-{slot}"

    def _start_worker(self, slot: int, remaining: float) -> None:
        self._in_flight_path(slot).write_bytes(b"")
        env = dict(os.environ, PYTHONPATH=_import_path(), KVFUZZ_FOUND=str(self.dirs["found"]),
                   KVFUZZ_KNOWN=str(self.known_path), KVFUZZ_STATS=str(self.dirs["stats"]),
                   KVFUZZ_IMPL=",".join(self.impl_specs), OMP_NUM_THREADS="1",
                   KVFUZZ_MEMORY=str(self.memory),
                   **{IN_FLIGHT_ENV: str(self._in_flight_path(slot))})
        # Inputs are timed here (`_timed_out`), not by libFuzzer's SIGALRM (an implementation
        # can take it over), so libFuzzer's -timeout is a day. Not 0: libFuzzer then arms a
        # 1-second alarm all the same, and atheris ends any input that has run past 1 s as a
        # "timeout" (an input of a slow engine, or the first after its judge starts). A worker
        # past --memory is ended by libFuzzer's -rss_limit_mb (its input then triaged here,
        # apart, under the same limit).
        command = [sys.executable, *self.target.command, str(self.dirs["bytes"]),
                   f"-max_total_time={max(1, int(remaining))}",
                   f"-artifact_prefix={self.dirs['artifacts']}/", "-print_final_stats=1",
                   f"-timeout={LIBFUZZER_TIMEOUT}", f"-rss_limit_mb={self.memory >> 20}",
                   *self.target.flags, *self.flags]
        self.started[slot] = time.time()
        log = open(self.dirs["logs"] / f"worker-{slot}.log", "ab")
        # A session of its own: Ctrl-C reaches the supervisor only, which stops workers cleanly;
        # and if the supervisor is killed outright, the kernel kills the worker.
        parent = os.getpid()
        self.workers[slot] = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.work,
            start_new_session=True, preexec_fn=lambda: die_with_parent(parent))
        log.close()

    def _reap(self, deadline: float) -> None:
        for slot, worker in list(self.workers.items()):
            code = worker.poll() if not self._timed_out(slot) else worker.wait()
            if code is None:
                continue
            del self.workers[slot]
            checking = self.checker.worker.process.pid if self.checker.worker else None
            sweep(keep=[w.pid for w in self.workers.values()] + [checking])  # what it left
            ended_by_input = self._collect_in_flight(slot)
            artifacts = self._collect_artifacts()
            self._triage_new()
            unexpected = code != 0 or ended_by_input
            if (unexpected and not ended_by_input and not artifacts
                    and not self._found_since(self.started[slot])):
                self.blind_crashes += 1
            remaining = deadline - time.monotonic()
            if (not self.stopping and remaining > 2 and unexpected
                    and self.blind_crashes < MAX_BLIND_CRASHES):
                self._start_worker(slot, remaining)

    def _timed_out(self, slot: int) -> bool:
        """Kill the worker when its input has run past --timeout (its in-flight file says)."""
        in_flight = read_in_flight(self._in_flight_path(slot))
        if in_flight is None or in_flight[0] <= self.timeout:
            return False
        _kill_group(self.workers[slot])
        return True

    def _collect_in_flight(self, slot: int) -> bool:
        """The input a worker that ended was checking, into found/ (triage re-runs it in a
        supervised process, where it ends or hangs again, and reports how). True if any."""
        in_flight = read_in_flight(self._in_flight_path(slot))
        if in_flight is None:
            return False
        self._in_flight_path(slot).write_bytes(b"")
        name, content = self.target.from_artifact(in_flight[1], self.impl_specs)
        write_atomic(self.dirs["found"] / name, content)
        # Out of the byte corpus, or the restarted worker meets it again while loading it.
        (self.dirs["bytes"] / hashlib.sha1(in_flight[1]).hexdigest()).unlink(missing_ok=True)
        self.ended_by_input += 1
        return True

    def _stop_workers(self) -> None:
        for worker in self.workers.values():
            try:
                os.killpg(worker.pid, signal.SIGINT)  # libFuzzer: print stats, exit
            except ProcessLookupError:
                pass
        for worker in self.workers.values():
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                _kill_group(worker)
        self.workers.clear()

    def _found_since(self, when: float) -> bool:
        return any(p.stat().st_mtime >= when - 1 for p in self.dirs["found"].iterdir())

    # -- findings ----------------------------------------------------------------------------
    def _collect_artifacts(self) -> int:
        """libFuzzer's crash and timeout files, as inputs in found/ for triage to re-run. The
        byte-corpus entry behind one (same SHA-1) is set aside, or every restarted worker would
        die on it again while loading the corpus. Returns how many were new."""
        fresh = [p for p in sorted(self.dirs["artifacts"].iterdir())
                 if p.name not in self.triaged and not p.name.startswith(".")]
        for path in fresh:
            self.triaged.add(path.name)
            name, content = self.target.from_artifact(path.read_bytes(), self.impl_specs)
            write_atomic(self.dirs["found"] / name, content)
            (self.dirs["bytes"] / path.name.split("-", 1)[-1]).unlink(missing_ok=True)
        return len(fresh)

    def _triage_new(self) -> None:
        """Shrink and save every found file not seen yet, once per signature."""
        fresh = [p for p in sorted(self.dirs["found"].iterdir())
                 if not p.name.startswith(".tmp-") and p.name not in self.triaged]
        for path in fresh:
            self.triaged.add(path.name)
            for finding in self.target.triage(path, self.impl_specs, lambda: self.stopping,
                                              self.checker):
                if finding.signature in self.findings:
                    continue
                where = self.corpus_dir if self.target.output == "corpus" else self.dirs["failures"]
                saved = finding.save(where)
                self.findings[finding.signature] = (finding, saved)
                with open(self.known_path, "a") as handle:  # workers pick it up by mtime
                    handle.write(finding.signature + "\n")
                print(f"found: {finding.headline}\n  saved {saved} ({finding.note})\n"
                      f"  replay: {finding.replay(saved)}", file=self.out, flush=True)

    # -- run ---------------------------------------------------------------------------------
    def run(self) -> int:
        """Exit status: 130 interrupted, else 1 a finding, 2 blind worker crashes, 0 none."""
        began = time.monotonic()
        deadline = began + self.seconds
        # A stop signal only sets `stopping` (installed before the corpus is read: that takes a
        # while too): the loops below look at it, and the found cases are still triaged.
        with handling(self._on_signal):
            try:
                seeded = self.prepare()
                print(f"fuzz {self.target.name}: {self.jobs} worker(s), {self.seconds:.0f} s, "
                      f"{seeded} new seed input(s), work dir {self.work}", file=self.out,
                      flush=True)
                for slot in range(self.jobs if not self.stopping else 0):
                    self._start_worker(slot, self.seconds)
                last_status = began
                while self.workers and not self.stopping and time.monotonic() < deadline + 5:
                    time.sleep(0.5)
                    self._reap(deadline)
                    if time.monotonic() - last_status >= STATUS_EVERY:
                        last_status = time.monotonic()
                        print(self.status_line(began), file=self.out, flush=True)
                self._stop_workers()
                self._collect_artifacts()
                self._triage_new()
            finally:
                self._stop_workers()
                self.checker.close()
        print(summary(self, time.monotonic() - began), file=self.out, flush=True)
        if self.interrupted:
            return INTERRUPTED
        return 1 if self.findings else (2 if self.blind_crashes else 0)

    def _on_signal(self, number, frame) -> None:
        self.stopping = self.interrupted = True

    def stats(self) -> dict:
        total = {"execs": 0, "features": Counter(), "failures": Counter()}
        for path in self.dirs["stats"].glob("stats-*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            total["execs"] += data["execs"]
            total["features"].update(data["features"])
            total["failures"].update(data["failures"])
        return total

    def status_line(self, began: float) -> str:
        stats, elapsed = self.stats(), time.monotonic() - began
        corpus_size = sum(1 for p in self.dirs["bytes"].iterdir() if not p.name.startswith("."))
        hit, total, _ = edge_coverage(self.target, stats["features"])
        edges = f"edge classes {hit}/{total}, " if total else ""
        return (f"[{elapsed:5.0f}s] {self.target.name}: {stats['execs']:,} execs "
                f"({stats['execs'] / max(elapsed, 1e-9):,.0f}/s), corpus {corpus_size} inputs, "
                f"{edges}failures {sum(stats['failures'].values()):,} "
                f"({len(self.findings)} new signature(s)), workers {len(self.workers)}")


def _kill_group(worker: subprocess.Popen) -> None:
    kill_tree(worker.pid)  # its session's group and every descendant
    worker.wait()


def _import_path() -> str:
    """PYTHONPATH for a worker: this process's, plus the directory it was started in when that
    is on its import path (`python -m kvfuzz`: an `--impl` module found there must be found by
    the worker too, which runs inside the work directory)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if ("" in sys.path or os.getcwd() in sys.path) and os.getcwd() not in paths:
        paths.insert(0, os.getcwd())
    return os.pathsep.join(paths)
