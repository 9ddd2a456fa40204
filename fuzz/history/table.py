"""The history as a table: per package, one row per class (`target/entry`) and one column per
release, each cell one word; then, for every cell that is not `agree`, what it found: the first
report's what line, replay line and saved file, a crash's stack, the reason a release is not
supported. The same as JSON for `--json`."""

from __future__ import annotations

from kvfuzz.fuzz.history import findings as saved
from kvfuzz.fuzz.history.cells import AGREE, CRASHED, DIVERGES, ERROR, UNSUPPORTED

WORD = {AGREE: "agree", DIVERGES: "DIVERGES", CRASHED: "CRASHED", UNSUPPORTED: "n/s",
        ERROR: "error", None: "-"}
LEGEND = ("agree: every input agreed or was outside the class's contract; DIVERGES / CRASHED: "
          "findings, below; n/s: not supported (why, below); error: the cell could not run "
          "(below; a rerun tries it again); -: not run; *: the release's saved findings "
          "replayed on the class (below)")
STACK_LINES = 6  # a crash's innermost frames shown; the log and the saved file keep them all


def grid(cells, records: dict) -> dict:
    """{package: (releases, classes, {(class, release): record or None})}, in run order."""
    packages: dict = {}
    for cell in cells:
        releases, classes, table = packages.setdefault(cell.release.package, ([], [], {}))
        if cell.release.version not in releases:
            releases.append(cell.release.version)
        if cell.name not in classes:
            classes.append(cell.name)
        table[cell.name, cell.release.version] = records.get(cell.key)
    return packages


def render(cells, records: dict) -> str:
    lines = []
    for package, (releases, classes, table) in grid(cells, records).items():
        width = max(len(name) for name in classes) + 2
        columns = [max(len(v), 8) + 2 for v in releases]
        lines.append(f"{package:<{width}}" + "".join(
            f"{v:>{w}}" for v, w in zip(releases, columns)))
        for name in classes:
            lines.append(f"{name:<{width}}" + "".join(
                f"{_word(table.get((name, v))):>{w}}" for v, w in zip(releases, columns)))
        lines.append("")
    lines.append(LEGEND)
    details = [line for cell in cells for line in _details(cell, records.get(cell.key))]
    if details:
        lines += ["", *details]
    return "\n".join(lines)


def _word(record) -> str:
    return WORD[record["status"] if record else None] + \
        ("*" if record and record.get("replayed") else "")


def _details(cell, record) -> list[str]:
    if not record:
        return []
    return _cell_details(cell, record) + _replayed(cell, record)


def _replayed(cell, record) -> list[str]:
    """The release's saved findings replayed on the class: one line each, by file."""
    replayed = record.get("replayed")
    if not replayed:
        return []
    lines = [f"{cell.release} {cell.name}: {saved.summary(replayed)}"]
    folder = f"{cell.release.package}-{cell.release.version}"
    for outcome in replayed["outcomes"]:
        what = f" ({outcome['what']})" if outcome.get("what") else ""
        lines.append(f"  {folder}/{outcome['file']}: {outcome['result']}{what}")
    return lines


def _cell_details(cell, record) -> list[str]:
    if record["status"] == AGREE:
        return []
    head = f"{cell.release} {cell.name}: {record['status']}"
    counts = record.get("counts") or {}
    if counts:
        head += (f" ({counts['inputs']} inputs: {counts['agree']} agree, {counts['outside']} "
                 f"outside, {counts['diverged']} diverged)")
    if record.get("reason"):
        return [f"{head}: {record['reason']}"]
    findings = record.get("findings") or []
    lines = [head + (f", {len(findings)} findings" if len(findings) > 1 else "")]
    for number, finding in enumerate(findings, 1):
        lines.append(f"  {number}. what    {finding['what']}")
        for label in ("op", "at", "crash"):
            if finding.get(label):
                lines.append(f"     {label:<7} {finding[label]}")
        lines += [f"     stack   {frame}" for frame in finding.get("stack", [])[:STACK_LINES]]
        if finding.get("replay"):
            lines.append(f"     replay  PYTHONPATH={record.get('folder', '?')} "
                         f"{finding['replay']}")
        if finding.get("file"):
            lines.append(f"     saved   {finding['file']}")
    return lines


def as_json(cells, records: dict) -> dict:
    """The report: every cell asked, its record (None where it has not run)."""
    return {"kvfuzz_history": 1, "legend": LEGEND,
            "cells": [{"release": str(cell.release), "package": cell.release.package,
                       "version": cell.release.version, "target": cell.target,
                       "impl": cell.impl, "cases": cell.cases, "seed": cell.seed,
                       "result": records.get(cell.key)} for cell in cells]}
