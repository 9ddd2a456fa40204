"""One process per implementation, beside the judge of a worker (`remote.py` says why): a fork of
the implementation's fork server (`zygote.py`: forked from the worker, where torch is imported,
it imported the implementation once), it checks the inputs the judge sends, one at a time, and
answers each with its transcript (`transcript.py`: one message per input, not a round trip per
call; the worker checks it again with its own oracle and comparison).

The judge times every input on its clock (the worker's `state`: `--timeout` from the input's
start), watches the process tree's memory (`--memory`), and reads answers as frames
(`frames.py`) checked for plain data (`remote.plain`); whichever breaks ends the process and the
input's check with `Ended`: "timed out after 10 s", "exceeded the memory limit of 4 GiB",
"corrupted the worker protocol: ...", or how it died ("crashed: SIGSEGV"), with where it was
(`crash_site.py`: the stack at a crash, or where it hung, and the trace op). The next input gets
a fresh process: another fork of the server, which does not import the implementation again.
"""

from __future__ import annotations

import collections
import time

from kvfuzz.fuzz.engine.apart import death
from kvfuzz.fuzz.engine.frames import FrameReader, ProtocolError
from kvfuzz.fuzz.engine.remote import Ended
from kvfuzz.fuzz.engine.transcript import Replay, protocol, read_batch, size_text
from kvfuzz.fuzz.engine.zygote import ForkServer, tree_memory
from kvfuzz.impl.registry import set_loader

DEFAULT_MEMORY = 4 << 30  # bytes per implementation process: an upstream engine loaded is ~1 GiB
POLL = 0.05  # seconds between looks at a process that has not answered yet
MEMORY_EVERY = 0.1  # seconds between reads of a process tree's resident memory
EXIT_WAIT = 1.0  # seconds for a fork server to report how a process that closed its pipe ended


# -- the judge's side ---------------------------------------------------------------------------
class Judging:
    """What a worker's judge needs to run implementations apart: the input's clock (`state`,
    see `isolation.mark`), `timeout`, `memory`, and the processes, one per implementation."""

    def __init__(self, state, timeout: float, memory: int):
        self.state, self.timeout, self.memory = state, timeout, memory
        self.processes: dict[str, ImplProcess] = {}
        self.servers: dict[str, ForkServer] = {}
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
            process = self.processes[impl.path] = ImplProcess(self.server(impl), self)
        return process

    def server(self, impl) -> ForkServer:
        """The implementation's fork server, started (the implementation imported) if it is
        not running: at the first input, or after the server itself ended."""
        server = self.servers.get(impl.path)
        if server is None or server.ended:
            others = [p.crash for p in self.processes.values() if not p.ended]
            others += [s.crash for s in self.servers.values() if not s.ended]
            server = self.servers[impl.path] = ForkServer(impl, self, others)
        return server

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
    def __init__(self, server: ForkServer, judging: Judging):
        self.judging, self.server, self.ended, self.last_memory = judging, server, False, 0.0
        # The inputs it was asked to check, in order, until their transcripts are taken.
        self.asked: collections.deque = collections.deque()
        self.inbox: collections.deque = collections.deque()  # messages read, not yet taken
        self.conn, self.pid, self.crash = server.spawn()
        self.exit: int | None = None
        self.reader = FrameReader(self.conn)
        answer = self._answer()
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
            dead = self._exit_status() is not None  # before reading: all it wrote is read
            try:
                self.inbox.extend(self.reader.messages())
            except ProtocolError as error:
                self._end(protocol(str(error)))
            if self.inbox:
                continue
            if dead or self.reader.eof:
                status = self._exit_status(EXIT_WAIT)  # it closed its end: its exit is on the way
                if status is None:
                    self._end(protocol("it closed its pipe"))
                self._end(Ended(*death(status), self.crash.site()))
            ends = deadline or self.judging.deadline()
            if ends is not None and time.monotonic() > ends:
                if self.reader.partial_since is not None:
                    self._end(protocol("a message begun and never finished"))
                self.crash.dump(self.pid)  # where it hung
                self._end(Ended(f"timed out after {self.judging.timeout:g} s", "timeout",
                                self.crash.site()))
            self._watch_memory()

    def _watch_memory(self) -> None:
        now = time.monotonic()
        if now - self.last_memory < MEMORY_EVERY:
            return
        self.last_memory = now
        try:
            self.server.check_memory()
        except Ended as ended:  # the server took it: this process ended with its server
            self._end(ended)
        used = tree_memory(self.pid)
        if used > self.judging.memory:
            self.crash.dump(self.pid)  # where it was taking it
            self._end(Ended(f"exceeded the memory limit of {size_text(self.judging.memory)} "
                            f"(--memory; {size_text(used)} resident)", "memory",
                            self.crash.site()))

    def _exit_status(self, wait_for: float = 0.0) -> int | None:
        """How it ended, once its server said; None while it runs (or past `wait_for`)."""
        if self.exit is None:
            try:
                self.exit = self.server.exit_of(self.pid, wait_for)
            except Ended as ended:  # its server ended: so did it (it dies with its parent)
                self._end(ended)
        return self.exit

    def stop(self) -> None:
        """Kill it and what it started (its server reaps it and reports the status)."""
        self.ended = True
        if self.exit is None:
            self.server.kill(self.pid)
        self.conn.close()
        self.crash.close()

    def _end(self, ended: Ended):
        self.stop()
        raise ended
