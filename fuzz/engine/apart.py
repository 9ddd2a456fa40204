"""Code kvfuzz did not write never runs in the supervisor: an outside implementation named by
import path is imported and shape-checked in a child process of its own (`run_apart`), and the
worker processes import it again for themselves. Whatever its module does when imported
(`sys.exit`, `os._exit`, a segfault, a hang, a signal handler of its own, `os.chdir`, a thread
that never ends, children of its own) happens in that child: the supervisor sees a one-line
error or the answer, and its own state (signals, working directory, modules) is untouched.

A process in which user code may run anyway (a worker, an atheris worker) is a `sandbox()`:
there the import happens in place.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import time
import traceback
from multiprocessing.connection import wait

from kvfuzz.fuzz.engine.containment import kill_tree
from kvfuzz.fuzz.engine.frames import FrameReader, ProtocolError, send
from kvfuzz.fuzz.engine.stop_signals import STOP_SIGNALS, blocked, unblock
from kvfuzz.impl.registry import ImplementationError, safe_text

LOAD_GRACE = 120.0  # seconds for importing an implementation (an upstream engine takes ~10 s)
_PR_SET_PDEATHSIG = 1
_SANDBOX = []  # non-empty in a process where user code runs by design


def sandbox() -> bool:
    return bool(_SANDBOX)


def enter_sandbox() -> None:
    """This process runs user code (a worker): nothing needs to be kept apart from it."""
    _SANDBOX.append(True)


def die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when its parent dies; stop now if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the supervisor's own cleanup still runs
        pass
    if os.getppid() != parent:
        os._exit(1)


def death(exitcode: int | None) -> tuple[str, str]:
    """(what, kind) for a child that ended without its answer."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:  # a real-time signal has no name
            name = f"signal {-exitcode}"
        return f"crashed: {name}", name
    # No guess at the cause: `os._exit`, an exit from a thread or a C library's `exit()` all
    # read the same from outside.
    return f"crashed: the process exited with status {exitcode}", "exit"


class Failed(Exception):
    """The child ended without an answer, or raised: `what` says how, in words."""

    def __init__(self, what: str, raised: bool = False):
        super().__init__(what)
        self.what, self.raised = what, raised


def run_apart(fn, arg, timeout: float):
    """`fn(arg)` in a forked child with a worker's treatment (stop signals ignored, killed with
    the supervisor, in a process group of its own that is killed after it); its picklable
    result, or `Failed`. kvfuzz's own one-line `ImplementationError` comes back as itself."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(fn, arg, writer, os.getpid()), daemon=True)
    with blocked():
        process.start()
    writer.close()
    frames, deadline = FrameReader(reader), time.monotonic() + timeout
    try:
        while True:  # one message, or the child's end; never more than `timeout` seconds
            if not wait([reader, process.sentinel], max(0.0, deadline - time.monotonic())):
                raise Failed(f"still running after {timeout:g} s")
            ended = not process.is_alive()  # before reading: all it wrote is read
            try:
                messages = frames.messages()
            except ProtocolError as error:
                raise Failed(f"corrupted the worker protocol: {error}") from None
            if messages or ended or frames.eof:
                break
        if not messages:
            process.join(5)
            raise Failed(death(process.exitcode)[0])
        kind, value = (messages[0] + (None, None))[:2]
        if kind == "raised" and isinstance(value, str):
            raise Failed(value, raised=True)
        if kind == "passed" and isinstance(value, ImplementationError):
            raise value
        if kind != "ok":
            raise Failed(f"corrupted the worker protocol: a message of kind {kind!r:.40}")
        return value
    finally:
        reader.close()
        _end(process)


def _child(fn, arg, writer, parent: int) -> None:
    die_with_parent(parent)
    os.setpgid(0, 0)  # whatever it starts is killed with it
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    unblock()
    enter_sandbox()
    try:
        message = ("ok", fn(arg))
    except Exception as error:  # noqa: BLE001 - our own errors pass back as themselves
        message = ("passed", error) if _passes(error) else ("raised", safe_text(error))
    except BaseException as error:  # SystemExit, KeyboardInterrupt: the module's own
        message = ("raised", safe_text(error))
    try:
        send(writer, message)
    except Exception:  # noqa: BLE001 - an answer that cannot cross: say so
        send(writer, ("raised", traceback.format_exc().splitlines()[-1][:300]))
    finally:
        os._exit(0)  # threads the module started do not keep this process alive


def _passes(error: Exception) -> bool:
    return type(error) is ImplementationError


def _end(process) -> None:
    if process.pid is not None:
        kill_tree(process.pid)
    process.join(5)
