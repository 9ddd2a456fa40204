"""The one lock-step judge of every trace target: the oracle and one implementation side by side
over a trace, compared after every op. A target declares what differs and the base runs it, as
Hypothesis's `RuleBasedStateMachine` runs rules:

    class MambaLockstep(Lockstep):
        KINDS = trace.KINDS                  # the format's ops: each needs exactly one handler
        EVENTS = ("alloc ok", ...)           # what `count` accepts (atheris features, summary)

        def build_model(self, trace): ...    # the oracle (plain Python: never guarded)
        def build_impl(self, trace, cls, device): ...   # the implementation's driver (guarded)

        @handles(Admit, AllocMany)
        def alloc(self, op):                 # a generator: the calls `op` stands for
            result = yield Call(f"alloc({n})", "alloc", (n,), compared=True)
            ...                              # records what came back; may return problems

        def state(self, op): ...             # problems after the op: state views, invariants

For each op the base picks its handler and drives it: every `Call` yielded is asked of the
oracle (its method of the same name, unless the call says otherwise; an exception in
`REJECTIONS` is the oracle refusing the call) and of the implementation (guarded: whatever it
raises is a problem, never a crash of the harness), and compared. A call that returned gives
the handler a `Result` to record (also when it differs: the handler's checks of what came back
say why), and the first call with problems is the op's last. A handler that yields nothing
resolved to nothing (a dead request: no call, no check). After an op that called the
implementation the base reads `state(op)` (its answers through `read`), names an ownership
problem when the op has problems and anything the implementation returned during it (call
results, state reads) holds a value the driver wrote over the caller's tensors (`POISONED`: an
allocator that kept one), and logs the op's call texts. `finish()` runs after the last op.

The declarations are checked when the class is defined: a missing, doubled or unknown op kind,
a handler that is not a generator, a malformed event list, each an error naming it. Counting
an undeclared event is an error when it happens.
"""

from __future__ import annotations

import inspect
import re
import traceback
from collections import Counter
from dataclasses import dataclass, is_dataclass
from typing import Callable, NamedTuple

from kvfuzz.fuzz.engine.remote import RemoteObject
from kvfuzz.fuzz.engine.report import note_raised
from kvfuzz.impl.poison import POISON
from kvfuzz.impl.registry import safe_text

SAME = "same"  # `Call.oracle`: the oracle's method of the implementation's name, same arguments


class LockstepError(TypeError):
    """A lock step declared wrongly: raised when its class is defined (or an undeclared event
    is counted), naming the class and what is wrong."""


class ImplementationRaised(Exception):
    """An implementation's exception in a state read (`Lockstep.read`), carried past the lock
    step's own code."""

    def __init__(self, error: BaseException):
        super().__init__(safe_text(error))
        self.error = error


@dataclass
class Call:
    """One call of an op, on both sides.

    text      the log line (empty: none); the base adds "-> expected" for a compared call
    method    the implementation driver's method; None: the implementation is not called
    args      its arguments, plain values
    oracle    how the oracle answers: SAME (its method of that name, same args), a
              callable() (its answer), or None (not asked: `expected` is None)
    compared  whether results are compared (else only a raise, or a missing rejection)
    compare   compare(expected, rejected, actual, raised) -> problems, in place of the default
    where     where(index) names an output position, for list differences
    """

    text: str
    method: str | None = None
    args: tuple = ()
    oracle: object = SAME
    compared: bool = False
    compare: Callable | None = None
    where: Callable | None = None


class Result(NamedTuple):
    """What a handler gets back for a call that returned (the oracle accepted it)."""

    expected: object
    actual: object


def handles(*kinds: type):
    """Marks a lock-step method as the handler of these op classes."""
    def mark(method):
        method._handles = kinds
        return method
    return mark


class Lockstep:
    KINDS: dict = {}               # the trace format's {name: op class}
    EVENTS: tuple[str, ...] = ()   # every name `count` accepts
    REJECTIONS: tuple[type, ...] = ()  # what the oracle raises to refuse a call
    # The ownership problem's text, when what the implementation returned shows POISON.
    OWNERSHIP = (f"{POISON} is what the caller wrote over every tensor it passed in, after the "
                 f"call: the implementation kept a caller's tensor, not a copy")
    _handlers: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        where = f"lock step {cls.__module__}.{cls.__qualname__}"
        handlers = {}
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            for kind in getattr(member, "_handles", ()):
                if kind in handlers and handlers[kind] != name:
                    raise LockstepError(f"{where}: op {kind.__name__} has two handlers, "
                                        f"{handlers[kind]} and {name}")
                if not inspect.isgeneratorfunction(member):
                    raise LockstepError(f"{where}: handler {name} must be a generator (it "
                                        f"yields the Calls its op stands for)")
                handlers[kind] = name
        kinds = set(cls.KINDS.values())
        missing = [k.__name__ for k in cls.KINDS.values() if k not in handlers]
        unknown = [k.__name__ for k in handlers if k not in kinds]
        if missing or unknown:
            raise LockstepError(f"{where}: " + "; ".join(
                part for part in (missing and f"no handler for op {', '.join(missing)}",
                                  unknown and f"handler for an op not in KINDS: "
                                              f"{', '.join(unknown)}") if part))
        if len(set(cls.EVENTS)) != len(cls.EVENTS) or \
                not all(isinstance(e, str) for e in cls.EVENTS):
            raise LockstepError(f"{where}: EVENTS must be distinct names")
        cls._handlers, cls._events = handlers, frozenset(cls.EVENTS)

    def __init__(self, trace, impl, device: str = "cpu", **options):
        """`impl`: what the target's implementation loads to (a class, a factory); `options`:
        what the target passes on to `build_impl` (e.g. what the implementation declares),
        kept as `self.options` for the oracle to follow too."""
        self.trace, self.options = trace, options
        self.log: list[str] = []
        self.events: Counter = Counter()
        self.returned: list = []  # what the implementation returned during the current op
        # The implementation first: an oracle may follow what it declares (e.g. lazy or eager).
        self.impl, raised = guarded(lambda: self.build_impl(trace, impl, device, **options))
        # a driver in this process (no proxy: a test's `Target.check`): its state reads come
        # whole (`read_changed`), as no process boundary is crossed
        self.in_process = raised is None and not isinstance(self.impl, RemoteObject)
        self.model = self.build_model(trace)
        self.broken = crash_problems(raised, "constructor") if raised else []
        if not self.broken:
            try:
                self.broken = self.initial_problems()
            except ImplementationRaised as error:
                self.broken = crash_problems(error.error, "constructor")

    # -- what a target declares ---------------------------------------------------------------
    def build_model(self, trace):
        raise NotImplementedError

    def build_impl(self, trace, impl, device: str, **options):
        raise NotImplementedError

    def initial_problems(self) -> list[tuple[str, str]]:
        """Problems of the freshly built implementation (e.g. its initial state)."""
        return []

    def state(self, op) -> list[tuple[str, str]]:
        """Problems after `op`: the state views compared, the invariants checked."""
        return []

    def read(self, method: str, *args):
        """The implementation's answer to a state query, for `state`: a raise of the
        implementation ends the op as its crash ("in the state read"), while a bug of the
        lock step's own still raises."""
        try:
            answer = getattr(self.impl, method)(*args)
        except (Exception, SystemExit) as error:  # noqa: BLE001 - the implementation's fault
            self.returned.append(numbers_in(error))
            raise ImplementationRaised(error) from error
        self.returned.append(answer)
        return answer

    def read_changed(self, method: str, *args) -> dict:
        """The whole state a driver's `impl.changed_reads.ChangedReads` read answers (its
        parts by name), from what changed since this lock step's last read of it: only the
        changes cross from the implementation's process. A malformed answer is the
        implementation's raise in the state read. A driver in this process (`in_process`) is
        asked for the whole state (`since` None: `ChangedReads.changed`), with the same checks
        of its answer."""
        held = self.__dict__.setdefault("_held_reads", {})
        number, parts = held.get(method, (0, None))
        answer = self.read(method, None if self.__dict__.get("in_process") else number, *args)
        try:
            parts = _changed_parts(answer, number, parts)
        except (TypeError, ValueError, IndexError) as error:
            raise ImplementationRaised(TypeError(f"{method}() answered {short(answer)}: "
                                                 f"{error}")) from None
        held[method] = (answer[0], parts)
        self.returned.append(parts)  # the whole state, for the ownership check
        return parts

    def poisoned(self) -> set[int]:
        """The values that show a kept caller tensor (a judge adds what it derives from
        POISON, e.g. the page id of the poisoned slot)."""
        return {POISON}

    def kept_a_tensor(self) -> bool:
        """Whether anything the implementation returned during the op holds a poisoned value."""
        return not self.poisoned().isdisjoint(integers(self.returned))

    def finish(self) -> list[tuple[str, str]]:
        """Problems after the last op (e.g. a whole-trace comparison)."""
        return []

    def context_lines(self) -> list[tuple[str, str]]:
        """Labelled lines every report of this trace carries (e.g. which of an implementation's
        variants ran), from what the lock step already read: never a new call."""
        return []

    # -- provided ------------------------------------------------------------------------------
    def count(self, name: str, times: int = 1) -> None:
        if name not in self._events:
            raise LockstepError(f"lock step {type(self).__qualname__}: event {name!r} is not "
                                f"in EVENTS")
        self.events[name] += times

    def step(self, op) -> tuple[str | None, list[tuple[str, str]]]:
        """(the op's log line, or None when it resolved to nothing; the problems found)."""
        if self.broken:
            return None, self.broken
        script = getattr(self, self._handlers[type(op)])(op)
        texts, problems, called, self.returned = [], [], False, []
        try:
            call = next(script)
        except StopIteration:
            return None, []
        while True:
            called = called or call.method is not None
            result, found, text = self._run(call)
            texts += [text] if text else []
            problems += found
            if result is None:  # it raised, or was refused: nothing to record
                script.close()
                break
            try:  # the handler records the result even when it differs (its invariants say why)
                call = script.send(result)
            except StopIteration as done:
                problems += done.value or []
                break
            if problems:  # no further call once the op has diverged
                script.close()
                break
        try:  # an op that called nothing (only the scheduler's tables changed) changed no state
            problems += self.state(op) if called else []
        except ImplementationRaised as raised:
            problems += crash_problems(raised.error, "state read")
        if problems and self.kept_a_tensor():
            problems.append(("ownership", self.OWNERSHIP))
        line = "; ".join(texts) or "(no call)"
        self.log.append(line)
        return line, problems

    def _run(self, call: Call):
        """(the Result, the problems, the log text) of one call on both sides."""
        expected = rejected = None
        if call.oracle is SAME and call.method is not None:
            try:
                expected = getattr(self.model, call.method)(*call.args)
            except self.REJECTIONS as error:
                rejected = error
        elif callable(call.oracle):
            try:
                expected = call.oracle()
            except self.REJECTIONS as error:
                rejected = error
        actual = raised = None
        if call.method is not None:  # (`guarded`, inline: two calls an op, every op)
            method = getattr(self.impl, call.method)
            try:
                actual = method(*call.args)
            except (Exception, SystemExit) as error:  # noqa: BLE001 - an outcome to compare
                raised = error
        self.returned.append(actual if raised is None else numbers_in(raised))
        if call.compare is not None:
            problems = call.compare(expected, rejected, actual, raised)
        else:
            problems = call_problems(call.compared, expected, rejected, actual, raised,
                                     call.where)
        text = call.text
        if text and rejected is not None:
            text += f" -> rejected ({rejected})"
        elif text and call.compared:
            text += f" -> {short(expected)}"
        done = raised is None and rejected is None
        return (Result(expected, actual) if done else None), problems, text


# -- what every lock step says the same way ---------------------------------------------------
def guarded(fn, *args):
    """(result, None), or (None, the exception) when the implementation under test raised."""
    try:
        return fn(*args), None
    except (Exception, SystemExit) as error:  # noqa: BLE001 - a raise is an outcome to compare
        return None, error


def integers(value, depth: int = 4):
    """Every int inside `value` (lists, tuples, sets, dicts' keys and values, dataclasses)."""
    if isinstance(value, int):
        yield value
    elif depth and isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from integers(item, depth - 1)
    elif depth and isinstance(value, dict):
        for key, item in value.items():
            yield from integers(key, depth - 1)
            yield from integers(item, depth - 1)
    elif depth and is_dataclass(value) and not isinstance(value, type):
        yield from integers(vars(value), depth)


def _changed_parts(answer, since: int, held: dict | None) -> dict:
    """`held` (the parts after read number `since`) with `answer`'s changes put on it: a new
    dict, and a new list for each list part that changed (what was held stays as it was); an
    answer whose `whole` is None is the whole state as it is (`ChangedReads.changed`)."""
    number, whole, sent = answer
    if type(number) is not int or type(sent) is not dict or \
            (whole is not None and type(whole) is not bool):
        raise TypeError("expected (read number, whole, parts)")
    if whole is None:  # the whole state, its parts as they are (a driver in this process)
        return sent
    if not whole and (held is None or number != since + 1):
        raise ValueError(f"changes to read {since}, numbered {number}")
    parts = {} if whole else dict(held)
    for key, change in sent.items():
        if change[0] == "=" and len(change) == 2:
            parts[key] = change[1]
        elif change[0] == "items" and len(change) == 3 and isinstance(parts.get(key), list):
            value = parts[key][:change[1]]
            value += [None] * (change[1] - len(value))
            for index, item in change[2]:
                if not 0 <= index < change[1]:
                    raise IndexError(f"item {short(index)} of {change[1]}")
                value[index] = item
            parts[key] = value
        else:
            raise ValueError(f"a change of part {short(key)} of kind {short(change[0])}")
    return parts


def numbers_in(error: BaseException) -> list[int]:
    """The whole numbers an implementation's exception message states (a poisoned page id
    shows there when the implementation checked what it had kept)."""
    return [int(n) for n in re.findall(r"(?<![\w.])-?\d+(?![\w.])", safe_text(error))[:64]]


def crash_problems(error: BaseException, where: str = "") -> list[tuple[str, str]]:
    error = error.error if isinstance(error, ImplementationRaised) else error
    note_raised(error)
    # An exception from the implementation's own process carries its traceback's tail.
    frames = getattr(error, "remote_frames", None) or traceback.format_exception(error)[-3:]
    head = safe_text(error) + (f" (in the {where})" if where else "")
    return [("crash", head)] + [("crash", line.rstrip()) for chunk in frames
                                for line in chunk.splitlines()[-2:]]


def list_diff(expected: list, actual: list, where=None) -> str:
    at = next((i for i, (e, a) in enumerate(zip(expected, actual)) if e != a),
              min(len(expected), len(actual)))
    lo = max(0, at - 2)
    place = f" ({where(at)})" if where else ""
    return (f"first difference at index {at}{place}: expected [{lo}:] {expected[lo:lo + 8]}, "
            f"actual [{lo}:] {actual[lo:lo + 8]}; lengths {len(expected)} vs {len(actual)}")


def short(value, width: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def call_problems(compared: bool, expected, rejected, actual, raised,
                  where=None) -> list[tuple[str, str]]:
    """What differs between the oracle's side of one call (`expected`, or `rejected`: the
    oracle's reason to refuse it) and the implementation's (`actual`, or `raised`). Results are
    compared only when `compared`; `where(index)` names an output position."""
    if rejected is not None:
        if raised is None:
            return [("rejection", f"expected the call to be rejected ({rejected}), but it was "
                                  f"accepted and returned {short(actual)}")]
        return []
    if raised is not None:
        return crash_problems(raised)
    if not compared or expected == actual:
        return []
    if expected is None or actual is None:
        return [("None vs success", f"expected {short(expected)}, actual {short(actual)}")]
    if isinstance(expected, list) and isinstance(actual, list):
        return [("result", list_diff(expected, actual, where))]
    return [("result", f"expected {short(expected)}, actual {short(actual)}")]
