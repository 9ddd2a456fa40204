"""The results file of a history run: JSON lines, one record per cell as it finishes (appended,
flushed and synced), so an interrupted run loses only the cells in flight. A rerun reads it and
skips every cell done with the same key (release, class, cases, seed, timeout); a cell that
ended in an error runs again. Records of cells this run does not ask for stay in the file."""

from __future__ import annotations

import json
from pathlib import Path

from kvfuzz.fuzz.engine.json_lines import JsonLines
from kvfuzz.fuzz.history.cells import DONE

DIRECTORY = Path(".kvfuzz") / "history"
DEFAULT = DIRECTORY / "results.jsonl"


class ResultsError(ValueError):
    """A results file that cannot be read or written; one line naming it."""


def load(path: Path) -> dict[str, dict]:
    """The records of `path` by cell key (the last record of a key wins); {} when absent."""
    path = Path(path)
    if not path.exists():
        return {}
    records = {}
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ResultsError(f"{path}: cannot read the results file: {error}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            key = record["key"]
        except (ValueError, KeyError, TypeError):
            if number == len(lines):  # the last line cut short by a kill: that cell runs again
                break
            raise ResultsError(f"{path}: line {number} is not a history record (use another "
                               f"--results file, or remove this one)") from None
        if not isinstance(key, str) or not isinstance(record.get("status"), str):
            raise ResultsError(f"{path}: line {number}: field key or status is not a string")
        records[key] = record
    return records


def done(records: dict[str, dict], key: str) -> dict | None:
    record = records.get(key)
    return record if record and record["status"] in DONE else None


class Appender(JsonLines):
    """Adds records to the results file as cells finish."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.handle = open(self.path, "a")
        except OSError as error:
            raise ResultsError(f"--results {self.path}: cannot write: "
                               f"{error.strerror or error}") from None

