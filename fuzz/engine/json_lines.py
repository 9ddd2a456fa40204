"""Results files of long runs (`kvfuzz mutate`, `kvfuzz history`): one JSON record per line,
appended as each result comes, so a run cut off at any point keeps every result it reported."""

from __future__ import annotations

import json
import os


class JsonLines:
    """An open results file: `add` puts a record on disk before it returns."""

    def __init__(self, handle):
        self.handle = handle

    def add(self, record: dict) -> None:
        self.handle.write(json.dumps(record, sort_keys=True) + "\n")
        self.handle.flush()
        os.fsync(self.handle.fileno())

    def close(self) -> None:
        self.handle.close()
