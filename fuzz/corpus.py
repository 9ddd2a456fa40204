"""Corpus files: one JSON case per file, named by content, written atomically.

The name is `<target>-<case id>.json`, so the same case found twice, by two workers or two runs,
lands in the same file instead of a duplicate, and a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kvfuzz.strategies.paged.case import Case, CaseFormatError, dumps, from_json, loads

DEFAULT_DIR = "corpus"


class CorpusError(ValueError):
    """A path given by the user is missing or unreadable; one-line message."""


def file_name(case: Case) -> str:
    return f"{case.target}-{case.case_id()}.json"


def save(case: Case, directory: str | os.PathLike = DEFAULT_DIR) -> Path:
    """Write `case` unless a file with its content already exists; return the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name(case)
    if path.exists():
        return path
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(dumps(case))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load(path: str | os.PathLike) -> Case:
    return loads(_read(path), source=str(path))


def load_any(path: str | os.PathLike):
    """A paged `Case`, or `(plugin Target, raw dict)` for a file of a plugin target's format."""
    from kvfuzz.fuzz.targets import by_format

    text = _read(path)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:  # also a 4300+ digit number, deep nesting
        raise CaseFormatError(f"{path}: not valid JSON: {error}") from None
    target = by_format(data.get("format")) if isinstance(data, dict) else None
    if target is not None:
        return target, data
    return from_json(data, source=str(path))


def _read(path) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise CorpusError(f"{path}: cannot read: {reason}") from None


def case_files(paths) -> list[Path]:
    """Files named directly, plus every *.json under named directories, in a stable order."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.json") if not p.name.startswith(".tmp-")))
        elif path.exists():
            found.append(path)
        else:
            raise CorpusError(f"{path}: no such file or directory")
    return found


__all__ = ["CaseFormatError", "CorpusError", "save", "load", "case_files", "file_name"]


def save_json(data: dict, name: str, directory: str | os.PathLike = DEFAULT_DIR) -> Path:
    """Write `data` as `directory/name` unless that file exists (names derive from content);
    atomic, like `save`. For plugin targets whose files are not `Case`s."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    if path.exists():
        return path
    descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(json.dumps(data, indent=1) + "\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
