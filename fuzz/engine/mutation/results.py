"""The results file: JSON lines, a header saying what run they belong to, then one record per
mutant, appended and flushed as each comes in. Rerunning the same command resumes from it; a
file written for another run (other options, or the mutated files changed since) starts over."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kvfuzz.fuzz.engine.json_lines import JsonLines

DIRECTORY = Path(".kvfuzz") / "mutate"


def default_path(target: str, identity: dict) -> Path:
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return DIRECTORY / f"{target}-{digest}.jsonl"


class ResultsFile(JsonLines):
    def __init__(self, path: Path, header: dict):
        self.path, self.header = Path(path), {"kvfuzz_mutate": 1, **header}

    def load(self) -> tuple[dict, str]:
        """(records by mutant id, a note for the user or ""), and the file ready to append."""
        records, note = {}, ""
        if self.path.exists():
            lines = self.path.read_text().splitlines()
            try:
                header = json.loads(lines[0]) if lines else None
                if header == self.header:
                    for line in lines[1:]:  # a later line adds to a mutant's record
                        record = json.loads(line)
                        records.setdefault(record["id"], {}).update(record)
                else:
                    note = f"{self.path}: written for another run or source; starting over"
            except (ValueError, KeyError, TypeError):
                note = f"{self.path}: not a results file of this run (unreadable); starting over"
                records = {}
            if records:
                note = f"{self.path}: resuming, {len(records)} mutants done before"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records.values())
        self.path.write_text(json.dumps(self.header, sort_keys=True) + "\n" + text)
        self.handle = open(self.path, "a")
        return records, note

