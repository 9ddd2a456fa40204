"""The mutation run's supervisor: worker processes (`worker.py`), each planned once, handed one
mutant at a time; every result appended to the results file as it comes (an interrupted run
keeps all it did and resumes from the file); a worker that dies is replaced, and the mutant it
ran counts as crashed."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback

from kvfuzz.fuzz.engine.apart import LOAD_GRACE, die_with_parent
from kvfuzz.fuzz.engine.containment import close_other_sockets, kill_tree, name_process
from kvfuzz.fuzz.engine.frames import FrameReader, ProtocolError, send
from kvfuzz.fuzz.engine.mutation import worker
from kvfuzz.fuzz.engine.stop_signals import STOP_SIGNALS, blocked, unblock
from kvfuzz.impl.registry import ImplementationError

MARGIN = 30.0  # seconds past a mutant's own timeout before its worker counts as hung


class MutationError(RuntimeError):
    """kvfuzz's own failure in a worker (its traceback), or a plan that cannot run."""


class Zygote:
    """One worker process: `plan` it, then `give` it mutants; `take` reads its answers."""

    def __init__(self, request: worker.Request):
        import torch  # noqa: F401  (before the fork: every worker starts with it)

        context = multiprocessing.get_context("fork")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, os.getpid()), daemon=True)
        with blocked():
            self.process.start()
        child.close()
        self.reader = FrameReader(self.conn)
        self.request, self.mutant, self.since = request, None, time.monotonic()
        self.planned = None  # its plan, once `wait_plan` has read it
        self.conn.send(("plan", request))

    def give(self, mutant, timeout: float) -> None:
        self.mutant, self.since, self.timeout = mutant, time.monotonic(), timeout
        self.conn.send(("mutant", mutant, timeout))

    def take(self) -> list:
        try:
            return self.reader.messages()
        except ProtocolError as error:
            return [("error", f"corrupted the worker protocol: {error}")]

    def late(self) -> bool:
        limit = LOAD_GRACE * 5 if self.mutant is None else self.timeout + MARGIN
        return time.monotonic() - self.since > limit

    def dead(self) -> bool:
        return not self.process.is_alive()

    def stop(self) -> None:
        if self.process.pid is not None:
            kill_tree(self.process.pid)
        self.process.join(5)
        self.conn.close()


def _serve(conn, parent: int) -> None:
    die_with_parent(parent)
    close_other_sockets(keep=conn.fileno())
    for number in STOP_SIGNALS:  # the supervisor's to take; it stops workers with SIGKILL
        signal.signal(number, signal.SIG_IGN)
    os.setpgid(0, 0)
    unblock()
    name_process(b"kvfuzz-mutate")
    multiprocessing.current_process()._config["daemon"] = False
    import torch
    torch.set_num_threads(1)
    worker._STATE["pipe"] = conn.fileno()
    while True:
        try:
            task = conn.recv()
        except EOFError:
            os._exit(0)
        try:
            if task[0] == "plan":
                send(conn, ("plan", worker.plan(task[1])))
            else:
                send(conn, ("result", task[1].id, worker.run_mutant(task[1], task[2])))
        except ImplementationError as error:
            send(conn, ("usage", str(error)))
        except Exception:  # noqa: BLE001 - kvfuzz's own bug: the supervisor prints it
            send(conn, ("error", traceback.format_exc()))


def wait_plan(zygote: Zygote) -> worker.Plan:
    """The worker's plan, or the one-line reason it has none."""
    while True:
        zygote.conn.poll(0.2)
        dead = zygote.dead()
        for message in zygote.take():
            if message[0] == "plan" and isinstance(message[1], worker.Plan):
                zygote.planned = message[1]
                return message[1]
            if message[0] == "usage":
                raise ImplementationError(message[1])
            raise MutationError(f"the worker failed while planning: {message[-1]}")
        if dead or zygote.late():
            raise MutationError("the worker ended while importing the implementation "
                                "(run `kvfuzz diff` on it to see how)")
