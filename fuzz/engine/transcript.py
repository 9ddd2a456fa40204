"""Transcripts: what crossed the proxies (`remote.py`) between a check and its implementation,
recorded where the implementation runs and replayed where it is judged.

The implementation's side runs the whole check itself (the lock step needs the oracle's answers
to plan its calls) with its implementation behind the proxies (`Recorder`, `record_check`), and
records every answer that crossed them, streamed in batches. The judge then runs the check
again over the transcript (`Replay`): the same requests, in the same order, answered from the
record, judged by its own oracle and comparison. Whatever the implementation did to the check
in its own process (a patched comparison, an oracle told to agree) changes nothing the judge
computes; a transcript that does not follow the judge's requests, or is not plain data
(`read_batch`), is the implementation's divergence ("corrupted the worker protocol").

Two pairs of processes use it: a worker and its implementations' processes
(`impl_process.py`), and a campaign worker and its judge (`fuzz/campaign/judge.py`).
"""

from __future__ import annotations

import dataclasses
import traceback

from kvfuzz.fuzz.engine.remote import (INT_RANGE, Ended, NotPlain, RemoteObject, plain,
                                      remote_error)
from kvfuzz.impl.registry import safe_text, set_loader

BATCH = 50_000  # units of data (`weight`) per transcript message


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
    if type(value) in _SCALARS:  # most values: no data-class look-up
        return 1
    if isinstance(value, (list, tuple)) and (not value or (
            type(value[0]) in _SCALARS and type(value[-1]) in _SCALARS)):
        return len(value)  # a row of slots or pages (the common case): its length
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        items = value.values() if isinstance(value, dict) else value
        if depth < 3 and len(value) <= 64:
            return len(value) + sum(weight(item, depth + 1) for item in items)
        return len(value)
    if dataclasses.is_dataclass(value) and depth < 3:
        return sum(weight(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return 1


_SCALARS = frozenset((int, float, str, bool, bytes, type(None)))


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
        self.weighed = 0  # a value answer's weight, from the walk that checks it (`_value`)
        try:
            answer = self._answer(kind, oid, body)
        except BaseException as error:  # noqa: BLE001 - whatever it raises is its outcome
            answer = _raised(error)
        self.records.append((kind, oid, _key(kind, body), answer))
        self.weight += self.weighed if answer[0] == "value" else weight(answer)
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
            return ("callable",) if callable(value) else self._value(value)
        if kind == "call":
            name, args, kwargs = body
            return self._value(getattr(target, name)(*args, **kwargs))
        if kind == "new":
            return "object", self._keep(target(*body[0], **body[1]))
        if kind == "build":
            return "object", self._keep(body[0](target, *body[1]))
        if kind == "apply":
            return self._value(body[0](target, *body[1]))
        raise ValueError(f"no request {kind!r}")

    def _value(self, value) -> tuple:
        """("value", `value`) if it is plain data (else the implementation's TypeError), weighed
        by the same walk (`weighed`): one walk of each answer, not two."""
        self.weighed = _plain(value) + 1
        return "value", value

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
            if isinstance(record, tuple) and len(record) == 4 and record[0] == STOPPED:
                raise protocol(f"its transcript ended before the check did; its process says "
                               f"that side of the check stopped on {str(record[3]):.600}")
            raise protocol(f"its transcript has {_shown(record)} where the judge asks "
                           f"{_shown(wanted)}")
        return decode(record[3], self.memory)


def _shown(record) -> str:
    text = repr(record[:3]) if isinstance(record, tuple) else type(record).__name__
    return text[:120]


def read_batch(message) -> tuple[list, bool]:
    """(records, whether they are the transcript's last) of one ("records" | "end", records)
    message, checked for shape and plain data; else the implementation's `protocol` Ended."""
    if not (isinstance(message, tuple) and len(message) == 2
            and message[0] in ("records", "end") and type(message[1]) is list):
        raise protocol(f"an answer of kind {str(message[0])!r:.40}")
    try:
        _plain_records(message[1])
    except NotPlain as error:
        raise protocol(f"not plain data ({error})") from None
    return message[1], message[0] == "end"


def _plain_records(records: list) -> None:
    """`plain` of every record, the common shape (kind, object id, key, (answer kind, ...))
    checked field by field, so that only the answers' values are walked (a trace's transcript
    holds thousands of records: walking each tuple as data was a third of the judge's time);
    any other shape goes through `plain` whole, as before."""
    low, high = INT_RANGE
    for record in records:
        if type(record) is tuple and len(record) == 4 and type(record[0]) is str and \
                type(record[1]) is int and low <= record[1] < high and \
                type(record[2]) is str and type(record[3]) is tuple and record[3] and \
                type(record[3][0]) is str:
            for value in record[3][1:]:
                plain(value, 2)  # at its depth in the record
        else:
            plain(record)


_RECORDING: list[bool] = []  # non-empty while `record_check` runs a check in this process


def recording() -> bool:
    """Whether the check running here is the implementation's side of one (`record_check`):
    only the requests it makes count, the judge concludes from its own replay. A check may skip
    what makes no request there (its oracle, its comparison): the judge runs them, and a check
    whose requests do not depend on them makes the same requests either way. (An
    implementation that patches this only changes its own side's work, which no one reads.)"""
    return bool(_RECORDING)


def record_check(target, item, impl, device: str, own, memory: int, send) -> None:
    """`target.check` of `item` with `impl` (`own`: its path and loaded object) behind a
    `Recorder`; the transcript goes to `send` in ("records", ...) batches and a last
    ("end", ...). What the check itself concluded is not sent: the judge concludes."""
    recorder = Recorder(own, memory, flush=lambda records: send(("records", records)))
    set_loader(recorder.load)
    _RECORDING.append(True)
    try:
        target.check(item, impl, device)
    except Exception as error:  # noqa: BLE001 - the judge's replay meets the same and says so
        # What stopped this side, for the judge's report where the transcript ends before its
        # check does: then it was no answer of the implementation's (the judge would meet that
        # too) but code that runs only here, kvfuzz's recording or what the implementation
        # changed in this process. Only a report's text: the judge's verdict is the same.
        recorder.records.append((STOPPED, 0, "", _stopped(error)))
    except Ended:  # the record that ended it is the transcript's last
        pass
    finally:
        _RECORDING.clear()
        set_loader(None)
    send(("end", recorder.records))


STOPPED = "stopped"  # a transcript's last record: what stopped the implementation's side


def _stopped(error: BaseException) -> str:
    try:
        lines = traceback.format_exception(error, limit=-3, chain=False)
        return " | ".join(line.strip().replace("\n", " ") for line in lines[1:])[:600]
    except Exception:  # noqa: BLE001 - an error that cannot be shown is named
        return type(error).__name__


def _plain(value) -> int:
    """How many values `value` holds (`plain`), if it is plain data; else the implementation's
    TypeError."""
    try:
        return plain(value)
    except NotPlain as error:
        raise TypeError(f"returned {error}: not plain data (ints, lists, dicts)") from None


def _raised(error: BaseException) -> tuple:
    text = safe_text(error)
    name = type(error).__name__
    if isinstance(error, MemoryError) or (
            isinstance(error, RuntimeError) and "allocate memory" in text):
        return "memory", text
    message = text[len(name) + 2:] if text.startswith(name + ": ") else ""
    try:
        # The last two frames and the line naming the error: formatting only those (no chain,
        # no outer frames) keeps a raise cheap (3.11's carets parse each line formatted, and a
        # trace's refusals raise by the hundred).
        frames = traceback.format_exception(error, limit=-2, chain=False)[-3:]
        tb = traceback.extract_tb(error.__traceback__, limit=-1)
        at = f"{tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else "?"
    except BaseException:  # noqa: BLE001 - a traceback that cannot be read
        frames, at = [text], "?"
    return ("raised", name, message, [f[:2000] for f in frames], at,
            isinstance(error, (Exception, SystemExit)))
