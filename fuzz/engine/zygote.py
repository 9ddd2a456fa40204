"""A fork server per implementation in each worker: it imports the implementation once, and every
process that checks inputs for that implementation (`impl_process.py`) is a fork of it. Importing
an upstream engine takes seconds (vLLM about 7 s here); a process that crashed, hung or ran out
of memory on an input is replaced by a fork, in milliseconds, not by that import again.

Isolation stays as it was: the server is the implementation's process as much as its children
(its import ran there), so everything it says is checked like an implementation's answer. It
speaks on a socket of its own (SOCK_SEQPACKET: one message per send), in three short texts:
"ok" or "usage <one line>" when loaded, "spawned <pid>" with the new process's pipe and crash
log as descriptors, "exit <pid> <status>" when one of its processes ended (it is their parent,
so only it can reap them). A pid it names must be its own child, or the server is refused
("corrupted the worker protocol"): the judge never signals a process because a server said so.
The server and its processes stay below the worker, so the worker's end takes them with it.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import select
import socket
import time
from multiprocessing.connection import Connection, wait

from kvfuzz.fuzz.engine.apart import death, die_with_parent
from kvfuzz.fuzz.engine.containment import (children, close_other_sockets, descendants,
                                              kill_tree, name_process)
from kvfuzz.fuzz.engine.crash_site import CrashLog, new_input
from kvfuzz.fuzz.engine.frames import send
from kvfuzz.fuzz.engine.remote import Ended
from kvfuzz.fuzz.engine.target import warm_up
from kvfuzz.fuzz.engine.transcript import protocol, record_check, size_text
from kvfuzz.impl.registry import ImplementationError, set_loader

POLL = 0.05  # seconds between looks at a server that has not answered yet
MAX_MESSAGE = 4096  # bytes of one message from a server (a usage line is cut to fit)
_SPAWNED = re.compile(rb"spawned ([1-9][0-9]{0,9})")
_EXITED = re.compile(rb"exit ([1-9][0-9]{0,9}) (-?[0-9]{1,5})")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ForkServer:
    """The judge's side: started with the implementation loaded (or `ImplementationError`, or
    `Ended` with how its import ended), then `spawn()` on request."""

    def __init__(self, impl, judging, others: list):
        self.judging, self.ended = judging, False
        self.exits: dict[int, int] = {}  # pid -> exit status, as the server reported
        self.live: set[int] = set()  # its processes spawned and not reported ended
        self.handles: dict[int, int] = {}  # pid -> pidfd of each process spawned, until it ends
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.crash = CrashLog()
        context = multiprocessing.get_context("fork")
        self.process = context.Process(target=_serve_forks, daemon=True, args=(
            theirs, impl, os.getpid(), judging.memory, self.crash, others))
        self.process.start()
        theirs.close()
        answer, _ = self._message()
        if answer.startswith(b"usage "):
            self.stop()
            raise ImplementationError(answer[6:].decode("utf-8", "replace"))
        if answer != b"ok":
            self._end(protocol(f"a fork server's answer {answer[:40]!r}"))

    def spawn(self) -> tuple[Connection, int, CrashLog]:
        """A fresh process for the implementation: its pipe, pid and crash log."""
        try:
            self.control.send(b"fork")
        except OSError:  # its end is gone: `_message` says how it ended
            pass
        answer, fds = self._message()
        found = _SPAWNED.fullmatch(answer)
        # The process is held by a pidfd before its parent is read, so the child checked is
        # the one signalled later, whatever happens to its pid (`kill`).
        handle = _pidfd(int(found[1])) if found is not None else None
        if handle is None or len(fds) != 3 or not self._owns(int(found[1])):
            for fd in fds + ([handle] if handle is not None else []):
                os.close(fd)
            self._end(protocol(f"a fork server's answer {answer[:40]!r} with {len(fds)} "
                               f"descriptor(s)"))
        try:  # descriptors of its choosing: a pipe where a file belongs is a lie too
            crash = CrashLog.adopt(fds[1], fds[2])
        except (OSError, ValueError) as error:
            for fd in fds + [handle]:
                try:
                    os.close(fd)
                except OSError:  # adopted, and closed with the half-made log
                    pass
            self._end(protocol(f"a fork server's crash log is not a file ({error})"))
        self.live.add(int(found[1]))
        self.handles[int(found[1])] = handle
        return Connection(fds[0]), int(found[1]), crash

    def kill(self, pid: int) -> None:
        """Kill its process `pid` and what it started, unless it has ended: the server reaps
        it, and its pid may name another process by then (its pidfd says which)."""
        handle = self.handles.pop(pid, None)
        if handle is None:
            return
        try:
            if not select.select([handle], [], [], 0)[0]:  # readable once it has exited
                kill_tree(pid)
        finally:
            os.close(handle)

    def exit_of(self, pid: int, wait_for: float = 0.0) -> int | None:
        """The exit status of its process `pid` once the server reported it, waiting up to
        `wait_for` seconds; `Ended` if the server itself ended (its processes die with it)."""
        ends = time.monotonic() + wait_for
        while pid not in self.exits:
            if not self.control_ready(max(0.0, ends - time.monotonic())):
                return None
            answer, fds = self._message(ends)
            for fd in fds:
                os.close(fd)
            if answer:  # a message out of turn
                self._end(protocol(f"a fork server's message {answer[:40]!r}"))
        handle = self.handles.pop(pid, None)
        if handle is not None:
            os.close(handle)
        return self.exits.pop(pid)

    def control_ready(self, timeout: float) -> bool:
        return bool(wait([self.control, self.process.sentinel], timeout))

    def _message(self, ends: float | None = None) -> tuple[bytes, list]:
        """The next message that is not an exit report (those are kept in `exits`), with its
        descriptors, within the input's time and memory; with `ends`, (b"", []) after an exit
        report or at `ends`."""
        while True:
            ready = self.control_ready(POLL)
            if ready:
                try:
                    data, fds, _, _ = socket.recv_fds(self.control, MAX_MESSAGE, 3)
                except OSError:
                    data, fds = b"", []
                exited = _EXITED.fullmatch(data)
                if exited is not None and not fds:
                    self.exits[int(exited[1])] = int(exited[2])
                    self.live.discard(int(exited[1]))
                    if ends is not None:  # `exit_of`, waiting for one of these
                        return b"", []
                    continue
                if data or fds:
                    return data, fds
                self.process.join(1)  # it closed its end: its exit is on the way
                what, kind = death(self.process.exitcode)
                self._end(Ended(f"{what} (its fork server, which imported it)", kind,
                                self.crash.site()))
            if ends is not None:
                if time.monotonic() > ends:
                    return b"", []
                continue
            limit = self.judging.deadline()
            if limit is not None and time.monotonic() > limit:
                self.crash.dump(self.process.pid)  # where it hung (its import, when loading)
                self._end(Ended(f"timed out after {self.judging.timeout:g} s", "timeout",
                                self.crash.site()))
            self.check_memory()

    def check_memory(self) -> None:
        """The server and what its import started, not its processes (watched on their
        inputs): memory it takes after loading (a thread of the import's) ends it and the
        input, as memory taken while loading does. (Counted from the server down, not as its
        tree less its processes: a fork's resident pages include those it shares with the
        server, so a subtraction would cancel the server's growth.)"""
        server = self.process.pid
        used = tree_memory(server, alone=True) + sum(
            tree_memory(pid) for pid in children(server) if pid not in self.live)
        if used > self.judging.memory:
            self._end(Ended(f"exceeded the memory limit of {size_text(self.judging.memory)} "
                            f"(--memory; {size_text(used)} resident in its fork server)",
                            "memory", self.crash.site()))

    def _owns(self, pid: int) -> bool:
        """Whether `pid` is a child of the server (read from /proc, not from the server)."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            return int(fields[1]) == self.process.pid
        except (OSError, IndexError, ValueError):
            return False

    def stop(self) -> None:
        self.ended = True
        if self.process.pid is not None:
            kill_tree(self.process.pid)
        for handle in self.handles.values():
            os.close(handle)
        self.handles.clear()
        self.process.join(5)
        self.control.close()
        self.crash.close()

    def _end(self, ended: Ended):
        self.stop()
        raise ended


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:  # gone already (or no such pid): not a process the server can hand over
        return None


def tree_memory(pid: int, alone: bool = False) -> int:
    """Resident bytes of `pid` and every process below it (`alone`: of `pid` only)."""
    total = 0
    for member in [pid] if alone else [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{member}/statm") as handle:
                total += int(handle.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):  # gone meanwhile, or no /proc
            pass
    return total


# -- the fork server ----------------------------------------------------------------------------
def _serve_forks(control, impl, parent: int, memory: int, crash: CrashLog, others: list) -> None:
    from kvfuzz.fuzz.targets import TARGETS  # imported in the worker already

    die_with_parent(parent)
    close_other_sockets(keep=control.fileno())  # the worker's pipe to the supervisor among them
    for other in others:  # the other implementations' logs: theirs to write
        other.close()
    crash.enable()
    name_process(b"kvfuzz-forks")
    # multiprocessing refuses children to a daemonic process: this one's are its purpose.
    multiprocessing.current_process()._config["daemon"] = False
    set_loader(None)
    try:
        loaded = impl.load()
    except ImplementationError as error:  # the judge stops this process
        control.send(b"usage " + str(error).encode("utf-8", "replace")[:MAX_MESSAGE - 6])
        os._exit(0)
    warm_up(TARGETS[impl.target], loaded)
    # What the import built lives as long as the server and its forks: kept out of the cyclic
    # collector's scans (an upstream engine and torch are some 600,000 objects a full
    # collection walks, and writes to, copying the forks' shared pages).
    gc.collect()
    gc.freeze()
    limit_data(memory)  # a backstop, as in its processes: between inputs nobody watches it
    control.send(b"ok")
    context = multiprocessing.get_context("fork")
    children: dict[int, multiprocessing.Process] = {}
    while True:
        ready = wait([control] + [child.sentinel for child in children.values()])
        for pid, child in list(children.items()):
            if child.exitcode is not None:
                del children[pid]
                control.send(b"exit %d %d" % (pid, child.exitcode))
        if control in ready:
            try:
                request = control.recv(16)
            except OSError:
                request = b""
            if request != b"fork":  # the worker is gone
                os._exit(0)
            theirs, ours = context.Pipe()
            log = CrashLog()
            child = context.Process(target=_serve_inputs, daemon=True, args=(
                ours, impl, loaded, os.getpid(), memory, log, crash))
            child.start()
            children[child.pid] = child
            ours.close()
            socket.send_fds(control, [b"spawned %d" % child.pid],
                            [theirs.fileno(), *log.descriptors()])
            theirs.close()
            log.close()


def _serve_inputs(conn, impl, loaded, parent: int, memory: int, crash: CrashLog,
                  server_crash: CrashLog) -> None:
    """One fork of the server: checks the inputs the judge sends, one at a time, and answers
    each with its transcript."""
    from kvfuzz.fuzz.targets import TARGETS

    die_with_parent(parent)
    close_other_sockets(keep=conn.fileno())  # the server's own socket to the judge among them
    server_crash.close()  # the server's log: a crash of this process is told in its own
    crash.enable()
    name_process(b"kvfuzz-impl")
    # An implementation may use a Pool (its processes are killed with this one's tree).
    multiprocessing.current_process()._config["daemon"] = False
    limit_data(memory)
    send(conn, ("ok",))
    own = (impl.path, loaded)
    while True:
        try:
            _, name, item, device, entry = conn.recv()
        except (EOFError, OSError):  # the worker is gone
            os._exit(0)
        new_input()
        record_check(TARGETS[name], item, entry, device, own, memory,
                     lambda message: send(conn, message))


def limit_data(memory: int) -> None:
    """A backstop to the judge's watch: one allocation past `memory` more than the process
    holds now fails at once (MemoryError), before it could take the machine down."""
    import resource

    try:
        with open("/proc/self/status") as handle:
            now = next(int(line.split()[1]) << 10 for line in handle
                       if line.startswith("VmData:"))
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        soft = now + memory if hard == resource.RLIM_INFINITY else min(hard, now + memory)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (OSError, ValueError, StopIteration):  # no /proc, or a limit we may not set
        pass
