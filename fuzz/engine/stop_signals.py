"""How a supervisor is stopped: SIGINT (Ctrl-C, `kill -INT`, `timeout -s INT`, a CI runner's
cancel) and SIGTERM stop a run alike; what was found stays saved and the summary prints.

The handlers are installed explicitly, whatever the process inherited. A process started with
SIGINT ignored keeps it ignored across exec, and Python then installs no KeyboardInterrupt
handler at all: every background job of a non-interactive shell (`kvfuzz diff ... &` in a
script, a CI step), `nohup`, and runners that start steps that way hand kvfuzz an ignored
SIGINT. Relying on Python's default, a `kill -INT` did nothing there and the run went on until
SIGKILL (issue 29).

`interrupting()` raises KeyboardInterrupt in the main thread at the first stop signal, wherever
the supervisor is (a wait, an import, a shrink), except inside `held()`: a received result being
recorded, a finding being saved. There the stop waits until the section ends, so a finding is
never cut in half. After the first stop, later signals change nothing: the run is already
unwinding, and its cleanup is bounded.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
INTERRUPTED = 130  # the exit status of a stopped command, as a shell reports SIGINT


class _Stop:
    active = 0        # depth of interrupting() blocks: the outermost installs and resets
    held = 0          # depth of held() sections now open
    pending = False   # a stop signal came inside one: raise when the outermost closes
    raised = False    # the stop has been raised: later signals are no-ops


@contextmanager
def handling(handler):
    """`handler(number, frame)` for SIGINT and SIGTERM while the block runs, the previous
    handlers restored after it. Only the main thread can own signals; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, old in previous.items():
            signal.signal(number, old)


def _raise_once(number, frame) -> None:
    if _Stop.raised:
        return
    if _Stop.held:
        _Stop.pending = True
        return
    _Stop.raised = True
    raise KeyboardInterrupt


@contextmanager
def interrupting():
    """The block stops with KeyboardInterrupt at the first SIGINT or SIGTERM (see the module).
    Nested blocks share the outermost's state: one stop per command."""
    if _Stop.active:
        yield
        return
    _Stop.held, _Stop.pending, _Stop.raised = 0, False, False
    _Stop.active += 1
    try:
        with handling(_raise_once):
            yield
    finally:
        _Stop.active -= 1


@contextmanager
def held():
    """A section a stop signal does not cut: the stop is raised when it ends."""
    _Stop.held += 1
    try:
        yield
    finally:
        _Stop.held -= 1
        if not _Stop.held and _Stop.pending and not _Stop.raised:
            _Stop.pending, _Stop.raised = False, True
            raise KeyboardInterrupt


@contextmanager
def blocked():
    """Stop signals held back from this thread for the block (e.g. around a fork, so that the
    child never runs the parent's handler before it installs its own); delivered after it."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def unblock() -> None:
    """In a forked child, after it set its own dispositions: take stop signals again."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
