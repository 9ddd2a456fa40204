"""Corpus files: one JSON input per file, named by content, written atomically, read back for any
target (the file's "format" field says whose it is).

The name is `<target>-<input id>.json`, so the same input found twice, by two workers or two
runs, lands in the same file instead of a duplicate, and a reader never sees half a file.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from kvfuzz.fuzz.targets import for_document
from kvfuzz.strategies.inputs import parse_json

DEFAULT_DIR = "corpus"
MAX_FILE_BYTES = 2**24  # no legitimate input comes near; the formats' own limits are tighter
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
            os.fchmod(descriptor, 0o666 & ~_umask())  # mkstemp's 0600, made what open() gives
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    return path


def check_writable(directory, option: str = "--corpus") -> Path:
    """Create `directory` if need be and prove a file can be written there, before a run, so a
    finding is never lost at the end of one; `CorpusError` in one line otherwise."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        descriptor, probe = tempfile.mkstemp(dir=path, prefix=".tmp-probe-")
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        reason = "not a directory" if path.exists() and not path.is_dir() else \
            (error.strerror or str(error))
        raise CorpusError(f"{option} {directory}: cannot write there: {reason}") from None
    return path


def save_or_print(target, item, directory, err) -> str:
    """`save`, or, when the disk refuses, the input's JSON on `err`: a finding is never lost."""
    try:
        return str(save(target, item, directory))
    except OSError as error:
        print(f"kvfuzz: error: cannot save to {directory} ({error.strerror or error}); the "
              f"{target.codec.noun} follows:\n{target.dumps(item)}", file=err, end="")
        return "(not saved: see the JSON above)"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
    return target, target.codec.from_json(data, source)


def _read(path) -> str:
    """A regular file's text, at most MAX_FILE_BYTES: never a FIFO (it would block), a device
    (`/dev/zero` never ends) or a directory, whatever the name says."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a FIFO must not block
        with os.fdopen(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise CorpusError(f"{path}: not a regular file")
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise CorpusError(f"{path}: larger than the limit of {MAX_FILE_BYTES:,} bytes")
        return data.decode()
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
