"""One cell of the history: one upstream class of one release, run as a user would run it by
hand, `kvfuzz diff TARGET --impl ENTRY --keep-going` in a process of its own with the release's
folder first on `PYTHONPATH`, and what it printed read back into a verdict.

The verdict comes from the exit status and the report's labelled lines (`fuzz/engine/report.py`:
`what`, `at`, `stack`, `replay`) and the summary's row, which are kvfuzz's own output:

- agree (status 0): every input agreed or was outside the class's contract;
- diverges (status 1): at least one finding that is not the end of a process; the first report's
  `what`, replay line and saved file come first;
- crashed (status 1, every finding a process that ended: a signal, a timeout, the memory limit),
  with the stack of the first;
- not supported (status 2, "not supported: ..."): the one line saying why the release cannot be
  driven;
- error: anything else (another usage error, kvfuzz itself failing); not kept as done, so a
  rerun tries the cell again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kvfuzz.fuzz.history.releases import Release

AGREE, DIVERGES, CRASHED, UNSUPPORTED, ERROR = (
    "agree", "diverges", "crashed", "not supported", "error")
DONE = (AGREE, DIVERGES, CRASHED, UNSUPPORTED)  # a rerun skips these; an error runs again
# How a process ended, as `isolation.py` words the `what` of such a divergence.
_ENDED = ("crashed:", "timed out", "exceeded the memory limit", "corrupted the worker protocol")
INTERRUPTED = 130


@dataclass(frozen=True)
class Cell:
    release: Release
    target: str
    impl: str
    cases: int
    seed: int
    timeout: float

    @property
    def key(self) -> str:
        """What a results file knows the cell by: a rerun with other cases runs it anew."""
        return (f"{self.release.package}=={self.release.version} {self.target} {self.impl} "
                f"cases={self.cases} seed={self.seed} timeout={self.timeout:g}")

    @property
    def name(self) -> str:
        """The class's column: `target/entry`."""
        return f"{self.target}/{self.impl}"

    def command(self, corpus: Path) -> list[str]:
        return [sys.executable, "-m", "kvfuzz.fuzz.cli", "diff", self.target, "--impl",
                self.impl, "--keep-going", "--cases", str(self.cases), "--seed", str(self.seed),
                "--timeout", f"{self.timeout:g}", "--corpus", str(corpus)]


def environment(folder: Path, base: dict | None = None) -> dict:
    """The worker's environment: the release's folder first on the path; kvfuzz's upstream
    cache still comes last (kvfuzz appends it when imported), for everything else it imports.
    Torch's C++ extensions are built in the release's folder: SGLang compiles its KV-event hash
    (`hicache_hash_cpp`) on first use, under one name whatever the release, and torch rebuilds
    a shared build each time another release's source is met (12 s or more, each time)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join([str(folder)] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TORCH_EXTENSIONS_DIR"] = str(folder / ".torch_extensions")
    return env


def run_cell(cell: Cell, folder: Path, corpus: Path, log: Path, started=None) -> dict:
    """Run `cell` (its output kept in `log`) and read its verdict; `started(process)` is told
    the process, so that a stop can reach it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(cell.command(corpus), stdout=out, stderr=subprocess.STDOUT,
                                   env=environment(folder), stdin=subprocess.DEVNULL)
        if started:
            started(process)
        status = process.wait()
    record = verdict(status, log.read_text(errors="replace"), cell.impl)
    record.update(key=cell.key, release=cell.release.version, package=cell.release.package,
                  target=cell.target, impl=cell.impl, cases_asked=cell.cases, seed=cell.seed,
                  seconds=round(time.monotonic() - begin, 1), log=str(log),
                  date=time.strftime("%Y-%m-%d", time.gmtime()))
    return record


def verdict(status: int, output: str, impl: str) -> dict:
    """The cell's record from `kvfuzz diff`'s exit status and output."""
    findings = reports(output)
    counts = summary_row(output, impl)
    if status == 0:
        return {"status": AGREE, "counts": counts, "findings": []}
    if status == 1 and findings:
        ended = all(f["what"].startswith(_ENDED) for f in findings)
        first = [f for f in findings if ended or not f["what"].startswith(_ENDED)][0]
        findings.remove(first)  # the report the cell names comes first
        return {"status": CRASHED if ended else DIVERGES, "counts": counts,
                "findings": [first, *findings]}
    if status == INTERRUPTED:
        return {"status": ERROR, "reason": "interrupted", "counts": counts, "findings": findings}
    line = _error_line(output)
    if status == 2 and "not supported:" in line:
        reason = line[line.index("not supported:") + len("not supported:"):].strip()
        reason = reason.split(", before any input")[0]  # said when it was loaded apart
        return {"status": UNSUPPORTED, "reason": reason, "counts": counts, "findings": []}
    return {"status": ERROR, "reason": f"exit {status}: {line}", "counts": counts,
            "findings": findings}


def reports(output: str) -> list[dict]:
    """Every DIVERGENCE report's what, op, at, stack and replay lines, in the order printed."""
    found = []
    for line in output.splitlines():
        if line.startswith("DIVERGENCE  "):
            found.append({"stack": []})
            continue
        labelled = re.match(r"  (what|op|at|stack|crash|replay)\s+(.*)$", line)
        if not found or not labelled:
            continue
        label, text = labelled.groups()
        if label == "stack":
            found[-1]["stack"].append(text)
        elif label not in found[-1]:
            found[-1][label] = text
    for report in found:
        saved = re.match(r"kvfuzz replay (\S+)", report.get("replay", ""))
        report["file"] = saved.group(1) if saved else None
        if not report["stack"]:
            del report["stack"]
    return [report for report in found if report.get("what")]


def summary_row(output: str, impl: str) -> dict:
    """The summary's counts of `impl` (inputs, agree, outside, diverged), or {}."""
    for line in reversed(output.splitlines()):
        row = re.match(rf"  {re.escape(impl)}\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)",
                       line)
        if row:
            numbers = [int(n.replace(",", "")) for n in row.groups()]
            return dict(zip(("inputs", "agree", "outside", "diverged"), numbers))
    return {}


def _error_line(output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("kvfuzz: error: ")]
    if errors:
        return errors[-1][len("kvfuzz: error: "):]
    lines = [line for line in output.splitlines() if line.strip()]
    return (lines or ["no output"])[-1].strip()[:300]
