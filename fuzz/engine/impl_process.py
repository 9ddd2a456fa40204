"""One process per implementation, beside the judge of a worker (`remote.py` says why): forked
from the worker (torch is imported there already), it imports the implementation, then checks
the inputs the judge sends, one at a time, and answers each with its transcript.

Transcripts, not a request per call: the implementation's process runs the whole check itself
(the lock step needs the oracle's answers to plan its calls), with its implementation behind
the same proxies the judge uses (`Recorder`), and records every answer that crossed them. The
judge then runs the check again over the transcript (`Replay`): the same calls, in the same
order, answered from the record, judged by its own oracle and comparison. One message per
input instead of hundreds of round trips; whatever the implementation did to the check in its
own process (a patched comparison, an oracle told to agree) changes nothing the judge
computes, and a transcript that does not follow the judge's calls is the implementation's
divergence ("corrupted the worker protocol").

The judge times every input on its clock (the worker's `state`: `--timeout` from the input's
start), watches the process tree's memory (`--memory`), and reads answers as frames
(`frames.py`) checked for plain data (`remote.plain`); whichever breaks ends the process and the
input's check with `Ended`: "timed out after 10 s", "exceeded the memory limit of 4 GiB",
"corrupted the worker protocol: ...", or how it died ("crashed: SIGSEGV"). The next input gets
a fresh process (and imports the implementation again).
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import os
import resource
import time
import traceback

from kvfuzz.fuzz.engine.apart import death, die_with_parent
from kvfuzz.fuzz.engine.containment import (close_other_sockets, descendants, kill_tree,
                                              name_process)
from kvfuzz.fuzz.engine.frames import FrameReader, ProtocolError, send
from kvfuzz.fuzz.engine.remote import Ended, NotPlain, RemoteObject, plain, remote_error
from kvfuzz.impl.registry import ImplementationError, safe_text, set_loader

DEFAULT_MEMORY = 4 << 30  # bytes per implementation process: an upstream engine loaded is ~1 GiB
POLL = 0.05  # seconds between looks at a process that has not answered yet
BATCH = 50_000  # units of data (`weight`) per transcript message
MEMORY_EVERY = 0.1  # seconds between reads of a process tree's resident memory
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def size_text(size: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{size} bytes"


def protocol(what: str) -> Ended:
    return Ended(f"corrupted the worker protocol: {what}", "protocol")


# -- answers, the same on both sides ------------------------------------------------------------
def decode(answer, memory: int = 0) -> tuple:
    """(kind, value) of one answer: ("value", plain data), ("object", id), ("callable", None);
    what the implementation raised is raised (`RemoteRaised`), an end of its check is `Ended`."""
    kind, body = (answer[0], answer[1:]) if isinstance(answer, tuple) and answer else ("?", ())
    if kind == "value" and len(body) == 1:
        return "value", body[0]
    if kind == "object" and len(body) == 1 and type(body[0]) is int:
        return "object", body[0]
    if kind == "callable" and not body:
        return "callable", None
    if kind == "raised" and len(body) == 5 and _texts(body[:2]) and _texts(body[2]) \
            and _texts(body[3:4]) and isinstance(body[4], bool):
        name, message, frames, at, ordinary = body
        if not ordinary:  # KeyboardInterrupt and kin: past every guard, as in one process
            raise Ended(f"raised {name}: {message}" if message else f"raised {name}", name)
        raise remote_error(name, message, frames, at)
    if kind == "memory" and len(body) == 1 and isinstance(body[0], str):
        raise Ended(f"exceeded the memory limit of {size_text(memory)} (--memory; {body[0]})",
                    "memory")
    raise protocol(f"an answer of kind {str(kind)!r:.40}")


def weight(value, depth: int = 0) -> int:
    """Roughly how many values `value` holds (its big lists counted by length)."""
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        items = value.values() if isinstance(value, dict) else value
        if depth < 3 and len(value) <= 64:
            return len(value) + sum(weight(item, depth + 1) for item in items)
        return len(value)
    if dataclasses.is_dataclass(value) and depth < 3:
        return sum(weight(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return 1


def _texts(values) -> bool:
    return isinstance(values, (list, tuple)) and all(isinstance(v, str) for v in values)


def _key(kind: str, body) -> str:
    """What a record names besides its kind and object: the attribute, method, builder or path."""
    if kind in ("getattr", "call", "load"):
        return str(body[0])
    if kind in ("build", "apply"):
        return getattr(body[0], "__qualname__", "?")
    return ""


class Recorder:
    """The implementation's side of one check: each request answered here and recorded; every
    `BATCH` units of data (ints, roughly) the records so far go to `flush` (a trace that reads
    a big pool after every op would otherwise hold it all)."""

    def __init__(self, own, memory: int, flush=None):
        self.own, self.memory = own, memory  # (path, loaded object) of this process's one
        self.objects: dict[int, object] = {}
        self.roots: dict[str, int] = {}
        self.records: list[tuple] = []
        self.flush, self.weight = flush, 0

    def load(self, impl) -> RemoteObject:
        return RemoteObject(self, self.request("load", 0, impl.path, impl)[1])

    def request(self, kind: str, oid: int, *body) -> tuple:
        try:
            answer = self._answer(kind, oid, body)
        except BaseException as error:  # noqa: BLE001 - whatever it raises is its outcome
            answer = _raised(error)
        self.records.append((kind, oid, _key(kind, body), answer))
        self.weight += weight(answer)
        if self.flush is not None and self.weight >= BATCH:
            self.flush(self.records)
            self.records, self.weight = [], 0
        return decode(answer, self.memory)

    def _answer(self, kind: str, oid: int, body) -> tuple:
        if kind == "load":  # this process's implementation, or another one it needs (eager)
            path, impl = body
            if path not in self.roots:
                loaded = self.own[1] if path == self.own[0] else self._load_here(impl)
                self.roots[path] = self._keep(loaded)
            return "object", self.roots[path]
        target = self.objects[oid]
        if kind == "getattr":
            value = getattr(target, body[0])
            return ("callable",) if callable(value) else ("value", _plain(value))
        if kind == "call":
            name, args, kwargs = body
            return "value", _plain(getattr(target, name)(*args, **kwargs))
        if kind == "new":
            return "object", self._keep(target(*body[0], **body[1]))
        if kind == "build":
            return "object", self._keep(body[0](target, *body[1]))
        if kind == "apply":
            return "value", _plain(body[0](target, *body[1]))
        raise ValueError(f"no request {kind!r}")

    def _load_here(self, impl):
        """Another implementation this check needs (compaction's eager one, for I12)."""
        set_loader(None)
        try:
            return impl.load()
        finally:
            set_loader(self.load)

    def _keep(self, obj) -> int:
        self.objects[len(self.objects)] = obj
        return len(self.objects) - 1


class Replay:
    """The judge's side: the same requests, answered from the transcript: `records`, then
    (with a `source`, the implementation's process) its batches as they arrive."""

    def __init__(self, records: list, memory: int, source=None):
        self.records, self.at, self.memory, self.source = records, 0, memory, source
        self.done = source is None

    def load(self, impl) -> RemoteObject:
        return RemoteObject(self, self.request("load", 0, impl.path)[1])

    def finish(self) -> None:
        """Read past what is left of this input's transcript (the judge stopped earlier)."""
        while not self.done:
            self.records, self.done = self.source.batch()

    def request(self, kind: str, oid: int, *body) -> tuple:
        while self.at >= len(self.records):
            if self.done:
                raise protocol("its transcript ended before the check did")
            self.records, self.done = self.source.batch()
            self.at = 0
        record = self.records[self.at]
        self.at += 1
        wanted = (kind, oid, _key(kind, body))
        if not (isinstance(record, tuple) and len(record) == 4 and record[:3] == wanted):
            raise protocol(f"its transcript has {_shown(record)} where the judge asks "
                           f"{_shown(wanted)}")
        return decode(record[3], self.memory)


def _shown(record) -> str:
    text = repr(record[:3]) if isinstance(record, tuple) else type(record).__name__
    return text[:120]


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

    def check(self, target, item, impl, device: str, upcoming=None):
        """`target.check`, the implementation's part done in its process, judged here. With
        `upcoming` (the input checked next), that process starts on it while this one is judged
        (both cores busy with one job)."""
        process = self.process(impl)
        if process.pending is not None and process.pending is not item:
            process.drain()  # a chunk that stopped early asked for an input it did not check
            process = self.process(impl)
        if process.pending is None:
            process.ask(target.name, item, device)
        process.pending = None
        replay = self.replay = Replay([], self.memory, source=process)
        if upcoming is not None:  # queued behind this one's transcript
            process.ask(target.name, upcoming, device)
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
        self.pending = None  # the input it was asked to check, until its transcript is taken
        self.inbox: collections.deque = collections.deque()  # messages read, not yet taken
        context = multiprocessing.get_context("fork")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, impl, os.getpid(),
                                                            judging.memory), daemon=True)
        self.process.start()
        child.close()
        self.reader = FrameReader(self.conn)
        answer = self._answer()
        if answer[0] == "usage" and len(answer) == 2 and isinstance(answer[1], str):
            self.stop()
            raise ImplementationError(answer[1])
        if answer != ("ok",):
            self._end(protocol(f"an answer of kind {str(answer[0])!r:.40}"))

    def ask(self, target_name: str, item, device: str) -> None:
        """Start checking `item` (its transcript: `transcript()`)."""
        self.pending = item
        try:
            self.conn.send(("run", target_name, item, device))
        except OSError:  # its end is gone: `_answer` says how it ended
            pass

    def drain(self) -> None:
        """Read past the transcript asked for last, within the timeout; a process that does not
        finish it in time, or ends, is stopped (the next input starts a fresh one)."""
        deadline, last = time.monotonic() + self.judging.timeout, False
        try:
            while not last:
                _, last = self.batch(deadline)
        except Ended:
            pass
        self.pending = None

    def batch(self, deadline: float | None = None) -> tuple[list, bool]:
        """The next records of the transcript being read, checked for shape and plain data,
        and whether they are its last."""
        answer = self._answer(deadline)
        if not (answer[0] in ("records", "end") and len(answer) == 2
                and type(answer[1]) is list):
            self._end(protocol(f"an answer of kind {str(answer[0])!r:.40}"))
        try:
            plain(answer[1])
        except NotPlain as error:
            self._end(protocol(f"not plain data ({error})"))
        return answer[1], answer[0] == "end"

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
                self._end(Ended(*death(self.process.exitcode)))
            ends = deadline or self.judging.deadline()
            if ends is not None and time.monotonic() > ends:
                if self.reader.partial_since is not None:
                    self._end(protocol("a message begun and never finished"))
                self._end(Ended(f"timed out after {self.judging.timeout:g} s", "timeout"))
            self._watch_memory()

    def _watch_memory(self) -> None:
        now = time.monotonic()
        if now - self.last_memory < MEMORY_EVERY:
            return
        self.last_memory = now
        used = tree_memory(self.process.pid)
        if used > self.judging.memory:
            self._end(Ended(f"exceeded the memory limit of {size_text(self.judging.memory)} "
                            f"(--memory; {size_text(used)} resident)", "memory"))

    def stop(self) -> None:
        self.ended = True
        if self.process.pid is not None:
            kill_tree(self.process.pid)
        self.process.join(5)
        self.conn.close()

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
def _serve(conn, impl, parent: int, memory: int) -> None:
    from kvfuzz.fuzz.targets import TARGETS  # imported in the worker already

    die_with_parent(parent)
    close_other_sockets(keep=conn.fileno())  # the worker's pipe to the supervisor among them
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
    limit_data(memory)
    send(conn, answer)
    while True:
        try:
            _, name, item, device = conn.recv()
        except (EOFError, OSError):  # the worker is gone
            os._exit(0)
        recorder = Recorder(own, memory, flush=lambda records: send(conn, ("records", records)))
        set_loader(recorder.load)
        try:
            TARGETS[name].check(item, impl, device)
        except Exception:  # noqa: BLE001 - the judge's replay meets the same and says so
            pass
        except Ended:  # the record that ended it is the transcript's last
            pass
        finally:
            set_loader(None)
        send(conn, ("end", recorder.records))


def _plain(value):
    """`value`, if it is plain data; else the implementation's TypeError."""
    try:
        plain(value)
    except NotPlain as error:
        raise TypeError(f"returned {error}: not plain data (ints, lists, dicts)") from None
    return value


def _raised(error: BaseException) -> tuple:
    text = safe_text(error)
    name = type(error).__name__
    if isinstance(error, MemoryError) or (
            isinstance(error, RuntimeError) and "allocate memory" in text):
        return "memory", text
    message = text[len(name) + 2:] if text.startswith(name + ": ") else ""
    try:
        frames = traceback.format_exception(error)[-3:]
        tb = traceback.extract_tb(error.__traceback__)
        at = f"{tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else "?"
    except BaseException:  # noqa: BLE001 - a traceback that cannot be read
        frames, at = [text], "?"
    return ("raised", name, message, [f[:2000] for f in frames], at,
            isinstance(error, (Exception, SystemExit)))


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
