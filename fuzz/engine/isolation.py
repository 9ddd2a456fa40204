"""Implementations run in worker processes that the harness supervises: whatever an
implementation does (segfault, abort, `sys.exit`, `os._exit`, raise KeyboardInterrupt, loop
forever, eat memory), the supervisor sees a divergence of that implementation, "crashed:
SIGSEGV" or "timed out after 10 s", and goes on. Only the user's own Ctrl-C or SIGTERM stops a
run. Inside a worker, each implementation runs in a process of its own, apart from the judge
(`impl_process.py`): the worker judges what that process did, and reports its crashes itself.

A worker dies with its supervisor whatever kills the supervisor (PR_SET_PDEATHSIG), ignores
Ctrl-C and SIGTERM (the supervisor owns them: `stop_signals.py`), and publishes which input it
is checking and since when in shared memory, so the supervisor can time a case out without a
message per case.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time
import traceback
from multiprocessing.connection import wait

from kvfuzz.fuzz.engine.apart import LOAD_GRACE, death, die_with_parent, enter_sandbox
from kvfuzz.fuzz.engine.containment import close_other_sockets, kill_tree, name_process
from kvfuzz.fuzz.engine.crash_site import site_lines
from kvfuzz.fuzz.engine.frames import FrameReader, ProtocolError, send
from kvfuzz.fuzz.engine.impl_process import DEFAULT_MEMORY, install, judging
from kvfuzz.fuzz.engine.remote import Ended
from kvfuzz.fuzz.engine.stop_signals import STOP_SIGNALS, blocked, unblock
from kvfuzz.fuzz.engine.target import DIVERGE, Outcome
from kvfuzz.impl.registry import ImplementationError, safe_text

DEFAULT_TIMEOUT = 10.0  # seconds per input: ms-scale cases and traces stay far below it
# The worker's judge times the implementation's process out itself (`impl_process.py`) and
# reports it; the supervisor kills a worker this much later (the judge is stuck: its process
# was stopped, or killed by the implementation).
JUDGE_MARGIN = 2.0
IDLE = -1


class HarnessError(RuntimeError):
    """Our own bug, raised in a worker: the supervisor stops with its traceback."""


def crash_outcome(target, item, impl, what: str, kind: str, site=None) -> Outcome:
    """A crash or a timeout of `impl` on `item` as a divergence: reported, saved, shrunk and
    replayed like any other; with `site` (`crash_site.CrashSite`), where it was: the trace op
    (shrinking cuts after it), the implementation's frame and the stack."""
    lines = [("process", "each input runs in a supervised worker process; this one ended "
                         "without a result")]
    where, step = site_lines(site, getattr(item, "ops", None),
                             getattr(target.judge, "describe_op", repr))
    return Outcome(DIVERGE, target.divergence(item, impl, what, lines + where,
                                              ("crashed", kind), step=step, crash=kind))


def guarded_check(target, item, impl, device: str, upcoming=()) -> Outcome:
    """`target.check`, with what an implementation may raise past it (KeyboardInterrupt,
    SystemExit) turned into its divergence. In a worker no KeyboardInterrupt is the user's;
    there the implementation runs in a process of its own, whose end (`Ended`: a crash, a
    timeout, the memory limit) is this input's outcome; `upcoming`, the inputs checked next,
    are started there while this one is judged."""
    apart = judging()
    try:
        if apart is not None:
            return apart.check(target, item, impl, device, upcoming)
        return target.check(item, impl, device)
    except Ended as ended:
        return crash_outcome(target, item, impl, ended.what, ended.kind, ended.site)
    except (KeyboardInterrupt, SystemExit) as error:
        what = f"raised {safe_text(error)}"
        return crash_outcome(target, item, impl, what, type(error).__name__)


def preload(impl) -> None:
    """Load `impl` before the clock of its first input starts. Should its process end while
    loading, that input's check (which loads it again) says how."""
    try:
        impl.load()
    except Ended:
        pass


def mark(state, index: int = -1, grace: float = 0.0) -> None:
    """Input `index` starts now (the supervisor reads `state` to time it out), its clock `grace`
    seconds later (loading an implementation: importing an upstream engine takes seconds, more
    on a busy machine, and is not the input's time). Set by the worker as it goes, and by the
    supervisor as it hands a task out: a task the worker never takes up (an implementation that
    read it off the pipe) still times out."""
    state[1] = index
    state[0] = time.monotonic_ns() + int(grace * 1e9)


def late_what(worker, timeout: float) -> tuple[str, str]:
    """(what, kind) for a worker past its input's deadline: a timeout, unless what held it up
    was a message that never finished (the messages after it went into its announced length)."""
    if worker.reader.partial_since is not None:
        return "corrupted the worker protocol: a message begun and never finished", "protocol"
    return f"timed out after {timeout:g} s", "timeout"


def protocol_outcome(target, item, impl, error: ProtocolError) -> Outcome:
    return crash_outcome(target, item, impl, f"corrupted the worker protocol: {error}",
                         "protocol")


class Worker:
    """One child process serving `_serve` tasks; `busy_since()` says since when its current
    input runs (None when idle), `current()` which index that is."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, memory: int = DEFAULT_MEMORY):
        import torch  # noqa: F401  (imported before the fork: a restarted worker starts fast)

        context = multiprocessing.get_context("fork")
        self.conn, child = context.Pipe()
        self.state = context.RawArray("q", 2)  # [start of the current input in ns, its index]
        self.state[0] = IDLE
        self.process = context.Process(target=_serve, args=(child, self.state, os.getpid(),
                                                            timeout, memory), daemon=True)
        with blocked():  # the child sets its own handlers first (`_serve`), then takes signals
            self.process.start()
        child.close()
        self.reader = FrameReader(self.conn)

    def give(self, task: tuple, index: int) -> None:
        """Send `task`, its first input `index` (on the clock from now, after the load grace)."""
        mark(self.state, index, grace=LOAD_GRACE)
        self.conn.send(task)

    def busy_since(self) -> float | None:
        started = self.state[0]
        return None if started == IDLE else started / 1e9

    def current(self) -> int:
        return self.state[1]

    def dead(self) -> bool:
        return not self.process.is_alive()

    def stop(self) -> None:
        """End the worker and every process it started, at once (it holds nothing that could be
        lost)."""
        if self.process.pid is not None:
            kill_tree(self.process.pid)
        self.process.join(5)
        self.conn.close()


def _serve(conn, state, parent: int, timeout: float, memory: int) -> None:
    die_with_parent(parent)
    close_other_sockets(keep=conn.fileno())
    # Stop signals are the supervisor's: a Ctrl-C or a `kill -TERM` to its group must not kill
    # a worker first and read as the implementation's crash. Ignoring them discards any that
    # came while the fork had them blocked; then the worker leads a group of its own, which
    # group signals do not reach (and what it starts is killed with it: `kill_tree`). SIGTERM
    # goes back to its default there: a `Pool` of the implementation stops its processes with
    # it. The supervisor stops workers with SIGKILL; the kernel kills them if it dies.
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    unblock()
    name_process(b"kvfuzz-worker")
    # multiprocessing refuses children to a daemonic process; an implementation may use a Pool
    # (its processes are killed with the worker's tree all the same).
    multiprocessing.current_process()._config["daemon"] = False
    enter_sandbox()  # implementations run beside the worker, each in a process of its own
    import torch
    torch.set_num_threads(1)  # tiny tensors; with --jobs, the workers fill the cores
    install(state, timeout, memory)
    from kvfuzz.fuzz.targets import TARGETS

    gc.freeze()  # torch and kvfuzz, imported for good: no collection walks them again
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the supervisor is gone
            os._exit(0)
        try:
            if task[0] == "check":
                _, name, item, impl, device = task
                target = TARGETS[name]
                preload(impl)  # imported before the clock starts
                mark(state)
                send(conn, ("outcome", guarded_check(target, item, impl, device)))
            else:  # ("call", fn, args): fn(*args, state=, report=), e.g. run.run_chunk
                _, fn, args = task
                fn(*args, state=state, report=lambda message: send(conn, message))
        except ImplementationError as error:  # it cannot be loaded: the user's one line
            send(conn, ("usage", str(error)))
        except Exception:  # our bug: the supervisor prints it and stops
            send(conn, ("error", traceback.format_exc()))


def raise_from_worker(kind: str, text: str) -> None:
    """A worker's report that is not a result: an implementation that cannot be loaded (the
    user's one-line error) or our own bug (its traceback)."""
    if kind == "usage":
        raise ImplementationError(text)
    raise HarnessError(text)


class Checker:
    """Single checks in a worker, with a timeout: `check` has the signature of `Target.check`
    plus the target, so shrinking, replay and triage use it in place of `target.check`."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, memory: int = DEFAULT_MEMORY):
        self.timeout, self.memory, self.worker = timeout, memory, None

    def check(self, target, item, impl, device: str = "cpu") -> Outcome:
        self.worker = self.worker if self.worker and not self.worker.dead() else \
            Worker(self.timeout, self.memory)
        self.worker.give(("check", target.name, item, impl, device), -1)
        deadline = None
        while True:
            self.worker.conn.poll(0.05)
            dead = self.worker.dead()  # before reading: all it wrote before dying is read
            try:
                messages = self.worker.reader.messages()
                if not dead and self.worker.reader.stalled(self.timeout):
                    raise ProtocolError("a message begun and never finished")
            except ProtocolError as error:
                self.close()
                return protocol_outcome(target, item, impl, error)
            for message in messages:
                if message[0] == "outcome" and isinstance(message[-1], Outcome):
                    return message[1]
                if message[0] in ("usage", "error") and isinstance(message[-1], str):
                    raise_from_worker(*message)
                self.close()
                return protocol_outcome(target, item, impl, ProtocolError(
                    f"a message of kind {message[0][:40]!r}"))
            if dead:
                self.worker.process.join()
                outcome = crash_outcome(target, item, impl, *death(self.worker.process.exitcode))
                self.close()
                return outcome
            started = self.worker.busy_since()
            deadline = started + self.timeout + JUDGE_MARGIN if started is not None else deadline
            if deadline is not None and time.monotonic() > deadline:
                what = late_what(self.worker, self.timeout)
                self.close()
                return crash_outcome(target, item, impl, *what)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None


def wait_any(workers, timeout: float) -> list:
    """The workers with a message or an exit to handle, within `timeout` seconds."""
    ready = wait([w.conn for w in workers] + [w.process.sentinel for w in workers], timeout)
    return [w for w in workers if w.conn in ready or w.process.sentinel in ready]
