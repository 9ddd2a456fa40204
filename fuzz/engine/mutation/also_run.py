"""`kvfuzz mutate --also-run "COMMAND"`: the user's own test command on the same mutants, the
mutated module in place of the original for that run (`overlay/sitecustomize.py`), so the
report can say which mutants kvfuzz kills, the tests kill, both or neither. A mutant the tests
kill is one whose command exits non-zero (pytest: a test failed) or runs past the timeout.
The command runs unmutated first and must pass: only tests that pass on the release count."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from kvfuzz.fuzz.engine.containment import kill_tree
from kvfuzz.fuzz.engine.mutation.mutants import apply
from kvfuzz.fuzz.engine.mutation.overlay import FOLDER

# What the tests are not asked about: the mutant was never built, or changes a message only.
SKIPPED = ("incompetent", "cosmetic")
DECLARED = "declared: "  # the `what` of a survivor relabelled by the equivalent-mutant list


def asked(record: dict) -> bool:
    """Whether the tests run on this mutant. One that compiles to the original's code is not
    (nothing can kill it); a declared equivalent is: if the tests kill it, its declaration
    says the change is outside what a caller relies on, and the report lists it to be judged."""
    if record["status"] in SKIPPED:
        return False
    return record["status"] != "equivalent" or declared(record)


def declared(record: dict) -> bool:
    return record["status"] == "equivalent" and str(record.get("what", "")).startswith(DECLARED)


class TestCommand:
    """Runs the command, one mutant per call, from several threads at once. Each run is a
    session of its own (its process tree killed whole on a timeout), so a Ctrl-C reaches only
    kvfuzz: `stop()` kills every run in flight, and no run starts after it. Without it a stop
    waited for each running test command to end by itself (minutes)."""

    def __init__(self, command: str):
        self.command, self.directory = command, Path(tempfile.mkdtemp(prefix="kvfuzz-also-"))
        self._lock, self._running, self._stopped = threading.Lock(), set(), False

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for pid in running:
            kill_tree(pid)

    def run(self, mutant=None, timeout: float | None = None) -> tuple[str, float, str]:
        """(verdict: "passed", "killed", "timeout" or "stopped", seconds, the output's last
        line). "stopped": `stop()` ended it, no verdict on the mutant."""
        env = dict(os.environ)
        env["PYTHONPATH"] = FOLDER + (os.pathsep + env["PYTHONPATH"]
                                      if env.get("PYTHONPATH") else "")
        if mutant is not None:
            mutated, _, _ = apply(Path(mutant.path).read_text(), mutant)
            source = self.directory / f"{abs(hash(mutant.id))}.py"
            source.write_text(mutated)
            env.update(KVFUZZ_MUTANT_MODULE=mutant.module, KVFUZZ_MUTANT_SOURCE=str(source))
        began = time.monotonic()
        with self._lock:
            if self._stopped:
                return "stopped", 0.0, ""
            process = subprocess.Popen(self.command, shell=True, env=env,
                                       start_new_session=True, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
            self._running.add(process.pid)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            process.communicate()
            return "timeout", time.monotonic() - began, ""
        finally:
            if process.poll() is None:
                kill_tree(process.pid)
            with self._lock:
                self._running.discard(process.pid)
        if self._stopped:
            return "stopped", time.monotonic() - began, ""
        last = (output.strip().splitlines() or [""])[-1][:200]
        verdict = "passed" if process.returncode == 0 else "killed"
        return verdict, time.monotonic() - began, last

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def matrix(records: list) -> dict:
    """Mutants both sides were asked about, by who kills them."""
    cells = {"both": 0, "kvfuzz only": 0, "tests only": 0, "neither": 0,
             "declared equivalent, tests kill": 0}
    for r in records:
        if "tests" not in r or not asked(r):
            continue
        if declared(r):  # outside the matrix: no kill was expected of kvfuzz
            cells["declared equivalent, tests kill"] += r["tests"] in ("killed", "timeout")
            continue
        ours = r["status"] in ("killed", "timeout", "crashed")
        theirs = r["tests"] in ("killed", "timeout")
        cells[("both" if theirs else "kvfuzz only") if ours else
              ("tests only" if theirs else "neither")] += 1
    return cells
