"""The worker-to-supervisor pipe, read so that nothing an implementation writes there can crash
or hang the supervisor.

An implementation runs in the worker and can reach the worker's end of the pipe: write junk to
its descriptor, announce a 1 GiB message and never send it, or craft a pickle. So a worker sends
each message as one frame (multiprocessing's 4-byte length, then `MAGIC`, then the pickle) and
the supervisor reads frames itself: never blocking (only what `select` says is there), a length
past `MAX_FRAME` or a frame without `MAGIC` refused at once, a frame begun and not finished
within the input's timeout refused, and a pickle that names anything but kvfuzz's own classes
and plain containers refused. Each refusal is a `ProtocolError`: the divergence of the
implementation the worker was running ("corrupted the worker protocol"), never the supervisor's
crash. (What the oracle and the comparison computed still comes from the worker: a message can
be refused, not proven true.)
"""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import pickle
import select
import sys
import time

MAGIC = b"KVF\x01"
MAX_FRAME = 1 << 26  # 64 MiB: a report with its trace is kilobytes, the biggest a few MB
_LENGTH = 4
# Besides kvfuzz's own classes, what a message may name: plain containers, nothing callable
# that could reach further (no getattr, no eval, no os).
_PLAIN = {("builtins", name) for name in ("set", "frozenset", "complex", "bytearray")}
_PLAIN |= {("collections", "Counter"), ("collections", "OrderedDict")}


class ProtocolError(Exception):
    """What came from the worker is not a message kvfuzz's worker code sent."""


def send(conn, message) -> None:
    """In a worker: `message` as one frame."""
    conn.send_bytes(MAGIC + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


class _Unpickler(pickle.Unpickler):
    """Names only what is already imported here (unpickling never imports), and of that only
    kvfuzz's own, plain containers, and data classes and enums (the inputs of a target declared
    outside kvfuzz): nothing whose call could reach further."""

    def find_class(self, module: str, name: str):
        if module == "kvfuzz" or module.startswith("kvfuzz.") or (module, name) in _PLAIN:
            return super().find_class(module, name)
        found = getattr(sys.modules.get(module), name, None) if "." not in name else None
        if isinstance(found, type) and (dataclasses.is_dataclass(found)
                                        or issubclass(found, enum.Enum)):
            return found
        raise ProtocolError(f"a message names {module}.{name}")


def _decode(payload: bytes):
    if payload[:len(MAGIC)] != MAGIC:
        raise ProtocolError(f"junk on the worker's pipe: {bytes(payload[:16])!r}...")
    try:
        message = _Unpickler(io.BytesIO(payload[len(MAGIC):])).load()
    except ProtocolError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever a corrupt pickle raises
        raise ProtocolError(f"an unreadable message ({type(error).__name__})") from None
    if not (isinstance(message, tuple) and message and isinstance(message[0], str)):
        raise ProtocolError(f"a message of type {type(message).__name__}")
    return message


class FrameReader:
    """The supervisor's side of one worker's pipe."""

    def __init__(self, conn):
        self.fd = conn.fileno()
        self.buffer = bytearray()
        self.partial_since: float | None = None  # when the unfinished frame began to arrive
        self.eof = False

    def messages(self) -> list:
        """Every whole message that has arrived, without waiting; `ProtocolError` on a bad one.
        `eof` is set once the worker's end is closed."""
        while not self.eof and select.select([self.fd], [], [], 0)[0]:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:  # ECONNRESET and kin: the worker end is gone
                chunk = b""
            if not chunk:
                self.eof = True
            self.buffer += chunk
            if len(self.buffer) > MAX_FRAME + _LENGTH + 1:
                break  # parse what is there first: a length past the limit is refused below
        found = []
        while len(self.buffer) >= _LENGTH:
            size = int.from_bytes(self.buffer[:_LENGTH], "big", signed=True)
            if not len(MAGIC) <= size <= MAX_FRAME:
                raise ProtocolError(f"a message of {size} bytes announced on the worker's pipe")
            if len(self.buffer) < _LENGTH + size:
                self.partial_since = self.partial_since or time.monotonic()
                break
            payload = bytes(self.buffer[_LENGTH:_LENGTH + size])
            del self.buffer[:_LENGTH + size]
            self.partial_since = None
            found.append(_decode(payload))
        if len(self.buffer) and len(self.buffer) < _LENGTH:
            self.partial_since = self.partial_since or time.monotonic()
        return found

    def stalled(self, seconds: float) -> bool:
        """A frame begun more than `seconds` ago and still not whole (nor will it be, if the
        worker is gone)."""
        if self.partial_since is None:
            return False
        return self.eof or time.monotonic() - self.partial_since > seconds
