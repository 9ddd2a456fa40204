"""The input an atheris worker is checking right now, where its supervisor can read it after the
worker is gone.

libFuzzer keeps a crash file only when it sees the crash itself: an implementation that calls
`os._exit(0)`, or one that takes over SIGALRM (libFuzzer's `-timeout`) and then hangs, ends or
stalls the worker with nothing saved, and the campaign read that as a clean run. So the harness
writes each input's bytes and start time to a file of its own before checking it and clears it
after; `kvfuzz fuzz` reads that file when a worker ends without being asked to, and times a
worker out itself (killing it) when an input has run past `--timeout`, whoever owns SIGALRM.

Layout: a header of two little-endian int64 (start, CLOCK_MONOTONIC ns, shared by every process
on the machine; byte count, 0 when idle), then the bytes. Two `pwrite`s per input.
"""

from __future__ import annotations

import os
import struct
import time

_HEADER = struct.Struct("<qq")
ENV = "KVFUZZ_INFLIGHT"


class InFlightWriter:
    """The worker's side; does nothing when the campaign gave no file (a worker run by hand)."""

    def __init__(self, path: str | None = None):
        path = path if path is not None else os.environ.get(ENV)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644) if path else None

    def begin(self, data: bytes) -> None:
        if self.fd is not None:
            os.pwrite(self.fd, data, _HEADER.size)  # the bytes first: a header never points
            os.pwrite(self.fd, _HEADER.pack(time.monotonic_ns(), len(data)), 0)  # at old ones

    def end(self) -> None:
        if self.fd is not None:
            os.pwrite(self.fd, _HEADER.pack(0, 0), 0)


def read_in_flight(path) -> tuple[float, bytes] | None:
    """(seconds since the input started, its bytes), or None when the worker was between inputs
    (or never wrote the file)."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return None
            started, size = _HEADER.unpack(header)
            if size <= 0:
                return None
            data = handle.read(size)
    except OSError:
        return None
    return (time.monotonic_ns() - started) / 1e9, data
