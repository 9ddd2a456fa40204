"""Where an implementation's process was when it ended without an answer: the Python stack at a
crash (`faulthandler`, written by that process into a file the judge reads back), the stack where
it hung (dumped on the judge's signal before it is killed), and the trace op it was running
(published in shared memory as the lock step goes). The judge turns them into report lines.

Everything read back is the implementation's process's text, so it is only ever shown: read
with a size limit, decoded leniently, never parsed for more than file, line and function.
"""

from __future__ import annotations

import faulthandler
import functools
import importlib.util
import mmap
import os
import re
import signal
import struct
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DUMP_SIGNAL = signal.SIGUSR2  # the judge's "where are you?" before it kills a hung process
DUMP_WAIT = 0.5  # seconds a hung process gets to write its stack
MAX_LOG = 1 << 16  # bytes of the crash log read back
MAX_FRAMES = 10  # stack lines in a report
NO_STEP, BUILDING = -2, -1  # what the progress value holds besides an op's index
_FRAME = re.compile(r'^\s*File "(.+)", line (\d+) in (.+?)\s*$')
_ARMED: list = []  # [its CrashLog] in an implementation's process


@dataclass(frozen=True)
class CrashSite:
    """`frames`: "file:line in function", innermost first, up to where kvfuzz's engine called
    the implementation (`outer`: how many frames further out, the engine's); `frame`: the
    innermost one of the implementation's own code ("" if none is known); `step`: the trace op
    it was running (BUILDING: its constructor; None: not a trace, or not known)."""

    frames: tuple[str, ...] = ()
    frame: str = ""
    step: int | None = None
    outer: int = 0


class CrashLog:
    """The judge's side, one per implementation process: the log file and the progress value
    (an int64 in a shared page of a file of its own). Made before the fork, so the process
    inherits both; or, for a process a fork server made (`zygote.py`), made there and handed
    to the judge as descriptors (`descriptors`, `adopt`)."""

    def __init__(self, files=None):
        if files is None:
            files = (tempfile.TemporaryFile(prefix="kvfuzz-crash-"),  # unlinked: nothing to clean
                     tempfile.TemporaryFile(prefix="kvfuzz-step-"))
            files[1].write(struct.pack("q", NO_STEP))
            files[1].flush()
        self.file, self._step_file = files
        self._step = mmap.mmap(self._step_file.fileno(), 8)

    @classmethod
    def adopt(cls, log_fd: int, step_fd: int) -> "CrashLog":
        """The judge's side of a log made in another process, from its two descriptors."""
        return cls((os.fdopen(log_fd, "w+b"), os.fdopen(step_fd, "r+b")))

    def descriptors(self) -> list[int]:
        return [self.file.fileno(), self._step_file.fileno()]

    @property
    def value(self) -> int:
        return struct.unpack_from("q", self._step)[0]

    @value.setter
    def value(self, step: int) -> None:
        struct.pack_into("q", self._step, 0, step)

    def enable(self) -> None:
        """In the implementation's process: a crash writes its stack to the log, and so does
        the judge's DUMP_SIGNAL; the lock step publishes its op (`reached`). Armed again
        before each input (`new_input`): a library the implementation imports may put its own
        SIGSEGV handler over faulthandler's (SGLang's tvm_ffi does), and enabling an enabled
        faulthandler only changes its file, hence disable first."""
        faulthandler.disable()
        faulthandler.enable(self.file.fileno(), all_threads=False)
        faulthandler.register(DUMP_SIGNAL, self.file.fileno(), all_threads=False)
        _ARMED[:] = [self]

    def dump(self, pid: int) -> None:
        """Ask a hung process for its stack, and give it DUMP_WAIT seconds to write it."""
        try:
            before = os.fstat(self.file.fileno()).st_size
            os.kill(pid, DUMP_SIGNAL)
        except OSError:
            return
        deadline = time.monotonic() + DUMP_WAIT
        while time.monotonic() < deadline and os.fstat(self.file.fileno()).st_size == before:
            time.sleep(0.02)
        time.sleep(0.05)  # the rest of the dump

    def site(self) -> CrashSite:
        try:
            self.file.seek(0)
            text = self.file.read(MAX_LOG).decode("utf-8", "replace")
        except (OSError, ValueError):
            text = ""
        step = self.value
        return site_of(text, None if step == NO_STEP else step)

    def close(self) -> None:
        for closing in (self._step.close, self._step_file.close, self.file.close):
            try:
                closing()
            except (OSError, ValueError, BufferError):  # closed already
                pass


def new_input() -> None:
    """In an implementation's process, before each input: armed again, no op known yet."""
    if _ARMED:
        _ARMED[0].enable()
        _ARMED[0].value = NO_STEP


def reached(step: int) -> None:
    """The lock step is at op `step` (BUILDING before the first); recorded only where an
    implementation's process watches it (elsewhere: nothing)."""
    if _ARMED:
        _ARMED[0].value = step


def site_lines(site: CrashSite | None, ops, describe) -> tuple[list, int | None]:
    """A report's lines for `site` (op, implementation's frame, stack) and the op shrinking
    cuts after (None: none); `ops`: the trace's ops (None: not a trace), `describe(op)`."""
    if site is None:
        return [], None
    lines, step = [], site.step
    if ops is not None and step is not None and -1 <= step <= len(ops):
        lines.append(("op", "none yet: in the implementation's constructor" if step == BUILDING
                      else f"after the last of {len(ops)}: the end-of-trace checks"
                      if step == len(ops) else f"{step} of {len(ops)}: {describe(ops[step])}"))
    if site.frame:
        lines.append(("at", f"{site.frame}  (the implementation's innermost frame)"))
    lines += [("stack", frame) for frame in site.frames[:MAX_FRAMES]]
    outer = site.outer + max(0, len(site.frames) - MAX_FRAMES)
    if site.frames and outer:
        lines.append(("stack", f"... and {outer} outer frames (kvfuzz's, calling it)"))
    cut = step if ops is not None and step is not None and 0 <= step < len(ops) else None
    return lines, cut


def site_of(log: str, step: int | None = None) -> CrashSite:
    """The frames of the last stack in `log` (faulthandler's text), innermost first."""
    blocks, current = [], None
    for line in log.splitlines():
        found = _FRAME.match(line)
        if found:
            if current is None:
                current = []
                blocks.append(current)
            current.append((found[1], int(found[2]), found[3]))
        else:
            current = None
    frames = blocks[-1] if blocks else []
    shown = [f"{short_path(path)}:{line} in {name}" for path, line, name in frames]
    own = next((i for i, (path, _, _) in enumerate(frames) if not _infrastructure(path)), None)
    inner = next((i for i, (path, _, _) in enumerate(frames)
                  if i > (own or 0) and path.startswith(_engine())), len(frames))
    return CrashSite(tuple(shown[:inner]), shown[own] if own is not None else "", step,
                     len(frames) - inner)


def short_path(path: str) -> str:
    """`path` relative to the longest `sys.path` entry it is under (sglang/srt/...)."""
    roots = [entry for entry in sys.path if entry and path.startswith(entry.rstrip("/") + "/")]
    return path[len(max(roots, key=len).rstrip("/")) + 1:] if roots else path


def _infrastructure(path: str) -> bool:
    """Whether a frame is not the implementation's: Python itself, torch, Triton, numpy, or
    kvfuzz's engine (the lock step and the processes that run it)."""
    if path.startswith("<") or path.startswith(_libraries()) or path.startswith(_engine()):
        return True
    stdlib = next((root for root in _stdlib() if path.startswith(root)), None)
    return stdlib is not None and "-packages/" not in path[len(stdlib):]


@functools.lru_cache(maxsize=1)
def _stdlib() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({paths["stdlib"].rstrip("/") + "/", paths["platstdlib"].rstrip("/") + "/"})


@functools.lru_cache(maxsize=1)
def _engine() -> str:
    return str(Path(__file__).resolve().parents[1]) + "/"  # kvfuzz's fuzz/


@functools.lru_cache(maxsize=1)
def _libraries() -> tuple[str, ...]:
    roots = []
    for name in ("torch", "triton", "numpy"):
        spec = importlib.util.find_spec(name)
        locations = spec.submodule_search_locations or [] if spec is not None else []
        roots += [location.rstrip("/") + "/" for location in locations]
    return tuple(roots)
