"""One process per implementation, beside the judge of a worker (`remote.py` says why): forked
from the worker (torch is imported there already), it imports the implementation, then checks
the inputs the judge sends, one at a time, and answers each with its transcript
(`transcript.py`: one message per input, not a round trip per call; the worker checks it again
with its own oracle and comparison).

The judge times every input on its clock (the worker's `state`: `--timeout` from the input's
start), watches the process tree's memory (`--memory`), and reads answers as frames
(`frames.py`) checked for plain data (`remote.plain`); whichever breaks ends the process and the
input's check with `Ended`: "timed out after 10 s", "exceeded the memory limit of 4 GiB",
"corrupted the worker protocol: ...", or how it died ("crashed: SIGSEGV"), with where it was
(`crash_site.py`: the stack at a crash, or where it hung, and the trace op). The next input gets
a fresh process (and imports the implementation again).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import resource
import time

from kvfuzz.fuzz.engine.apart import death, die_with_parent
from kvfuzz.fuzz.engine.containment import (close_other_sockets, descendants, kill_tree,
                                              name_process)
from kvfuzz.fuzz.engine.crash_site import CrashLog, new_input
from kvfuzz.fuzz.engine.frames import FrameReader, ProtocolError, send
from kvfuzz.fuzz.engine.remote import Ended
from kvfuzz.fuzz.engine.target import warm_up
from kvfuzz.fuzz.engine.transcript import (Replay, protocol, read_batch, record_check,
                                           size_text)
from kvfuzz.impl.registry import ImplementationError, set_loader

DEFAULT_MEMORY = 4 << 30  # bytes per implementation process: an upstream engine loaded is ~1 GiB
POLL = 0.05  # seconds between looks at a process that has not answered yet
MEMORY_EVERY = 0.1  # seconds between reads of a process tree's resident memory
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


# -- the judge's side ---------------------------------------------------------------------------
class Judging:
    """What a worker's judge needs to run implementations apart: the input's clock (`state`,
    see `isolation.mark`), `timeout`, `memory`, and the processes, one per implementation."""

    def __init__(self, state, timeout: float, memory: int):
        self.state, self.timeout, self.memory = state, timeout, memory
        self.processes: dict[str, ImplProcess] = {}
        self.replay: Replay | None = None

    def load(self, impl):
        """`impl.load()` in the worker: inside a check, the implementation as the transcript
        has it; outside (loading before the clock starts), its process, started."""
        if self.replay is not None:
            return self.replay.load(impl)
        return self.process(impl)

    def process(self, impl) -> ImplProcess:
        process = self.processes.get(impl.path)
        if process is None or process.ended:
            process = self.processes[impl.path] = ImplProcess(impl, self)
        return process

    def check(self, target, item, impl, device: str, upcoming=()):
        """`target.check`, the implementation's part done in its process, judged here. With
        `upcoming` (the inputs checked next, in order), that process goes on to them while this
        one is judged: it is never idle waiting for the judge (both cores busy with one job),
        and its transcripts come back in the order asked, each judged on its own clock."""
        process = self.process(impl)
        if process.asked and process.asked[0] is not item:
            process.drain()  # a chunk that stopped early asked for inputs it did not check
            process = self.process(impl)
        if not process.asked:
            process.ask(target.name, item, device, impl)
        process.asked.popleft()
        replay = self.replay = Replay([], self.memory, source=process)
        for later in list(upcoming)[len(process.asked):]:  # queued behind this transcript
            process.ask(target.name, later, device, impl)
        try:
            outcome = target.check(item, impl, device)
        except Ended:  # its process ended the check: the next input starts a fresh one
            process.stop()
            raise
        finally:
            self.replay = None
        try:
            replay.finish()
        except Ended:  # it ended after the part the judge needed: the next input starts afresh
            pass
        return outcome

    def deadline(self) -> float | None:
        started = self.state[0]
        return None if started < 0 else started / 1e9 + self.timeout


_JUDGING: list[Judging] = []


def install(state, timeout: float, memory: int) -> None:
    """In a worker: implementations run in processes of their own from now on."""
    _JUDGING[:] = [Judging(state, timeout, memory)]
    set_loader(_JUDGING[0].load)


def judging() -> Judging | None:
    return _JUDGING[0] if _JUDGING else None


class ImplProcess:
    def __init__(self, impl, judging: Judging):
        self.judging, self.ended, self.last_memory = judging, False, 0.0
        # The inputs it was asked to check, in order, until their transcripts are taken.
        self.asked: collections.deque = collections.deque()
        self.inbox: collections.deque = collections.deque()  # messages read, not yet taken
        context = multiprocessing.get_context("fork")
        self.conn, child = context.Pipe()
        self.crash = CrashLog()
        others = [p.crash for p in judging.processes.values() if not p.ended]
        self.process = context.Process(target=_serve, args=(child, impl, os.getpid(),
                                                            judging.memory, self.crash, others),
                                       daemon=True)
        self.process.start()
        child.close()
        self.reader = FrameReader(self.conn)
        answer = self._answer()
        if answer[0] == "usage" and len(answer) == 2 and isinstance(answer[1], str):
            self.stop()
            raise ImplementationError(answer[1])
        if answer != ("ok",):
            self._end(protocol(f"an answer of kind {str(answer[0])!r:.40}"))

    def ask(self, target_name: str, item, device: str, impl) -> None:
        """Start checking `item` with `impl` after those asked before it (its transcript:
        `batch()`). `impl` is the catalogue entry: two entries may name one class (offload:
        vLLM's manager with each policy) and share its process, each checked as it declares."""
        self.asked.append(item)
        try:
            self.conn.send(("run", target_name, item, device, impl))
        except OSError:  # its end is gone: `_answer` says how it ended
            pass

    def drain(self) -> None:
        """Read past the transcripts of every input asked for and not taken, within the timeout
        each; a process that does not finish one in time, or ends, is stopped (the next input
        starts a fresh one)."""
        try:
            while self.asked:
                deadline, last = time.monotonic() + self.judging.timeout, False
                while not last:
                    _, last = self.batch(deadline)
                self.asked.popleft()
        except Ended:
            pass
        self.asked.clear()

    def batch(self, deadline: float | None = None) -> tuple[list, bool]:
        """The next records of the transcript being read, checked for shape and plain data,
        and whether they are its last."""
        try:
            return read_batch(self._answer(deadline))
        except Ended as ended:
            self._end(ended)

    def _answer(self, deadline: float | None = None) -> tuple:
        """The next message, within the input's time (or `deadline`) and memory; else
        `Ended`."""
        while True:
            if self.inbox:
                self._watch_memory()
                return self.inbox.popleft()
            self.conn.poll(POLL)
            dead = not self.process.is_alive()  # before reading: all it wrote is read
            try:
                self.inbox.extend(self.reader.messages())
            except ProtocolError as error:
                self._end(protocol(str(error)))
            if self.inbox:
                continue
            if dead or self.reader.eof:
                self.process.join(1)  # it closed its end: its exit is on the way
                if self.process.exitcode is None:
                    self._end(protocol("it closed its pipe"))
                self._end(Ended(*death(self.process.exitcode), self.crash.site()))
            ends = deadline or self.judging.deadline()
            if ends is not None and time.monotonic() > ends:
                if self.reader.partial_since is not None:
                    self._end(protocol("a message begun and never finished"))
                self.crash.dump(self.process.pid)  # where it hung
                self._end(Ended(f"timed out after {self.judging.timeout:g} s", "timeout",
                                self.crash.site()))
            self._watch_memory()

    def _watch_memory(self) -> None:
        now = time.monotonic()
        if now - self.last_memory < MEMORY_EVERY:
            return
        self.last_memory = now
        used = tree_memory(self.process.pid)
        if used > self.judging.memory:
            self.crash.dump(self.process.pid)  # where it was taking it
            self._end(Ended(f"exceeded the memory limit of {size_text(self.judging.memory)} "
                            f"(--memory; {size_text(used)} resident)", "memory",
                            self.crash.site()))

    def stop(self) -> None:
        self.ended = True
        if self.process.pid is not None:
            kill_tree(self.process.pid)
        self.process.join(5)
        self.conn.close()
        self.crash.close()

    def _end(self, ended: Ended):
        self.stop()
        raise ended


def tree_memory(pid: int) -> int:
    """Resident bytes of `pid` and every process below it."""
    total = 0
    for member in [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{member}/statm") as handle:
                total += int(handle.read().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):  # gone meanwhile, or no /proc
            pass
    return total


# -- the implementation's process ---------------------------------------------------------------
def _serve(conn, impl, parent: int, memory: int, crash: CrashLog, others: list) -> None:
    from kvfuzz.fuzz.targets import TARGETS  # imported in the worker already

    die_with_parent(parent)
    close_other_sockets(keep=conn.fileno())  # the worker's pipe to the supervisor among them
    for other in others:  # the other implementations' logs: theirs to write
        other.close()
    crash.enable()
    name_process(b"kvfuzz-impl")
    # multiprocessing refuses children to a daemonic process; an implementation may use a Pool
    # (its processes are killed with this one's tree all the same).
    multiprocessing.current_process()._config["daemon"] = False
    set_loader(None)
    own = (impl.path, None)
    try:
        own = (impl.path, impl.load())
        answer = ("ok",)
    except ImplementationError as error:  # the judge stops this process
        answer = ("usage", str(error))
    else:
        warm_up(TARGETS[impl.target], own[1])
    limit_data(memory)
    send(conn, answer)
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
    try:
        with open("/proc/self/status") as handle:
            now = next(int(line.split()[1]) << 10 for line in handle
                       if line.startswith("VmData:"))
        _, hard = resource.getrlimit(resource.RLIMIT_DATA)
        soft = now + memory if hard == resource.RLIM_INFINITY else min(hard, now + memory)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (OSError, ValueError, StopIteration):  # no /proc, or a limit we may not set
        pass
