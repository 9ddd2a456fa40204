"""Corpus files: one JSON input per file, named by content, written atomically, read back for any
target (the file's "format" field says whose it is).

The name is `<target>-<input id>.json`, so the same input found twice, by two workers or two
runs, lands in the same file instead of a duplicate, and a reader never sees half a file.
"""

from __future__ import annotations

import os
import signal
import tempfile
from contextlib import contextmanager
from pathlib import Path

from kvfuzz.fuzz.targets import for_document
from kvfuzz.strategies.inputs import parse_json

DEFAULT_DIR = "corpus"
_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1}


class CorpusError(ValueError):
    """A path given by the user is missing or unreadable; one-line message."""


@contextmanager
def signals_held():
    """Hold Ctrl-C / SIGTERM (and libFuzzer's own handlers) until a file write is complete."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def write_atomic(path: Path, content: str | bytes) -> Path:
    """Write through a temporary file in the same directory, then rename: readers see the whole
    file or none, and no signal can cut it in half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode() if isinstance(content, str) else content
    with signals_held():
        descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return path


def save(target, item, directory: str | os.PathLike = DEFAULT_DIR) -> Path:
    """Write `item` unless a file with its content already exists; return the path."""
    path = Path(directory) / target.file_name(item)
    return path if path.exists() else write_atomic(path, target.dumps(item))


def load(path: str | os.PathLike):
    """(target, input) of a saved file; `FormatError` or `CorpusError` in one line otherwise."""
    return loads(_read(path), str(path))


def loads(text: str, source: str):
    return from_document(parse_json(text, source), source)


def from_document(data: object, source: str):
    """(target, input) of a decoded JSON document, of whichever target's format it is."""
    target = for_document(data, source)
    return target, target.from_json(data, source)


def _read(path) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise CorpusError(f"{path}: cannot read: {reason}") from None


def input_files(paths) -> list[Path]:
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
