"""The saved findings of a release replayed on it: `corpus/history/<package>-<version>/` holds
the triaged findings as that release shipped them (`docs/release-history.md`). A history cell
whose target has files there replays them after its `kvfuzz diff`, as a user would by hand:
`kvfuzz replay FILES --impl ENTRY`, in a process with the release's folder first on the path.

Each file's outcome is read from what `kvfuzz replay` printed: `still diverges` (its report, by
the file's path), `no longer diverges` (its `ok` line), `outside` (its `outside contract` line),
or `not replayed` (no line: the replay stopped first). A finding is expected to still diverge on
the class it was found on; another class of the same target may not share the bug, so the
outcome is said, not judged. The whole replay is `not supported` (status 2 with that line) or
an `error` (any other end) when no file could run."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from kvfuzz.fuzz.history.cells import (ERROR, INTERRUPTED, UNSUPPORTED, Cell, environment,
                                       reports, verdict)

DEFAULT = Path("corpus") / "history"
STILL, FIXED, OUTSIDE, NOT_REPLAYED = (
    "still diverges", "no longer diverges", "outside", "not replayed")


def files(root: Path | None, cell: Cell) -> list[Path]:
    """The saved findings of the cell's release and target: `<target>-<id>.json`, the name
    every corpus file of that target has."""
    if root is None:
        return []
    folder = Path(root) / f"{cell.release.package}-{cell.release.version}"
    return sorted(folder.glob(f"{cell.target}-*.json")) if folder.is_dir() else []


def names(paths: list[Path]) -> list[str]:
    """What a record keeps of the files replayed: a resumed run replays again when they differ."""
    return [path.name for path in paths]


def command(cell: Cell, paths: list[Path]) -> list[str]:
    return [sys.executable, "-m", "kvfuzz.fuzz.cli", "replay", *map(str, paths), "--impl",
            cell.impl, "--timeout", f"{cell.timeout:g}"]


def replay(cell: Cell, folder: Path, paths: list[Path], log: Path, started=None) -> dict:
    """Replay `paths` on the cell's class with `folder` first on the path (the output kept in
    `log`); the record's `replayed` field."""
    log.parent.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(command(cell, paths), stdout=out, stderr=subprocess.STDOUT,
                                   env=environment(folder), stdin=subprocess.DEVNULL)
        if started:
            started(process)
        status = process.wait()
    found = outcomes(status, log.read_text(errors="replace"), paths, cell.impl)
    found.update(seconds=round(time.monotonic() - begin, 1), log=str(log))
    return found


def outcomes(status: int, output: str, paths: list[Path], impl: str) -> dict:
    """{"files": names, "status": None, or why no file ran ("interrupted" when stopped),
    "outcomes": [{file, result, what}]}."""
    diverged = {Path(r["file"]).name: r["what"] for r in reports(output)
                if r.get("file") and r.get("replay", "").endswith(f" --impl {impl}")}
    said = {}
    for line in output.splitlines():
        kind = re.match(r"(ok|outside contract)\s+(\S+)\s+" + re.escape(impl) + r"\b", line)
        if kind:
            said[Path(kind.group(2)).name] = (FIXED if kind.group(1) == "ok" else OUTSIDE,
                                              line.split(f"{impl}: ", 1)[-1]
                                              if kind.group(1) != "ok" else "")
    results = []
    for name in names(paths):
        if name in diverged:
            results.append({"file": name, "result": STILL, "what": diverged[name]})
        else:
            result, what = said.get(name, (NOT_REPLAYED, ""))
            results.append({"file": name, "result": result, "what": what})
    whole = None
    if status == INTERRUPTED:  # stopped: not kept, a resumed run replays them again
        whole = "interrupted"
    elif status not in (0, 1) and not diverged and not said:
        ended = verdict(status, output, impl)  # the same one-line reading as a cell's
        whole = f"{UNSUPPORTED}: {ended['reason']}" if ended["status"] == UNSUPPORTED else \
            f"{ERROR}: {ended.get('reason', '')}"
    return {"files": names(paths), "status": whole, "outcomes": results}


def summary(replayed: dict) -> str:
    """One line: `2 saved findings: 2 still diverge`."""
    if replayed.get("status"):
        return f"{len(replayed['files'])} saved findings not replayed: {replayed['status']}"
    counts: dict[str, int] = {}
    for outcome in replayed["outcomes"]:
        counts[outcome["result"]] = counts.get(outcome["result"], 0) + 1
    plural = {STILL: "still diverge", FIXED: "no longer diverge"}
    parts = [f"{n} {plural.get(result, result) if n > 1 else result}"
             for result, n in counts.items()]
    return f"{len(replayed['files'])} saved finding{'s' * (len(replayed['files']) != 1)}: " \
        + ", ".join(parts)
