"""Guarding and recording a live object: the calls an engine makes on its allocator, pool or
manager, turned into the ops of its target's trace as they happen (`kvfuzz.guard`,
`kvfuzz.record`; the adapters are `fuzz/<target>/guard.py`).

A `Session` keeps the trace so far. Guarding, it also keeps the target's lock step over a live
driver (the implementation side answers from the engine's own calls, the oracle side is the
target's model) and steps it once per op: the first op with problems is a divergence, reported
as a seeded run reports it, saved as a corpus file of the trace up to that op (which `kvfuzz
replay` runs against a fresh object of the same class) and raised as `Mismatch`. After that
the session is spent: calls go through unchecked and unrecorded, the report was made once.

Guarding runs in the engine's own process, with no isolation: it is the engine's code that is
watched, where it runs. What the trace cannot express (a setting or an argument the target does
not model) is `GuardUnsupported`, raised before the call is made: a guard that cannot check a
call never lets it pass as checked.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import replace
from pathlib import Path

from kvfuzz.fuzz.engine import corpus as corpus_files
from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.impl.registry import YOURS, Implementation, register_object


class GuardUnsupported(Exception):
    """A call or setting of the live object that the target's trace does not model (the one
    line says which, and why); raised before the call reaches the object."""


def live_guard(name: str):
    """Target `name`'s guard: guard(obj, check=..., impl=..., corpus=..., **settings)."""
    from kvfuzz.fuzz.targets import TARGETS

    if name not in TARGETS:
        raise ValueError(f"unknown target {name!r} (known: {', '.join(TARGETS)})")
    owner = TARGETS[name]
    if owner.live is None:
        known = ", ".join(t.name for t in TARGETS.values() if t.live) or "none"
        raise ValueError(f"target {name!r} has no live guard (targets with one: {known})")
    module, _, function = owner.live.partition(":")
    return getattr(importlib.import_module(module), function)


def live_lockstep(lockstep: type) -> type:
    """`lockstep` whose implementation side is the driver it is handed, not one it builds."""
    def build_impl(self, trace, driver, device, **options):
        return driver

    return type(f"Live{lockstep.__name__}", (lockstep,), {"build_impl": build_impl})


def live_implementation(target, obj, impl=None) -> Implementation:
    """The record reports name the live object by: `impl` (a name or import path of the
    target's catalogue) when given; else the catalogue entry of the class's own import path
    (the released class: the replay line names it); else the class, by its import path."""
    if impl is not None:
        return target.catalogue.resolve(impl) if isinstance(impl, str) else impl
    cls = type(obj)
    defined = f"{cls.__module__}:{cls.__qualname__}"
    for entry in target.catalogue.implementations:
        if entry.path == defined:
            return entry
    return Implementation(defined, target.name, register_object(cls), "a guarded live object",
                          YOURS)


class Session:
    """The trace of one live object's calls, checked op by op when `driver` is given."""

    def __init__(self, target, header, impl: Implementation, driver=None,
                 corpus: str | Path = corpus_files.DEFAULT_DIR):
        self.target, self.header, self.impl = target, header, impl
        self.ops: list = []
        self.corpus = corpus
        self.spent = False           # a divergence was reported: nothing more is checked
        self.on_unsupported = "raise"  # or "stop": an unmodelled call ends the session
        self.divergence = None
        self.lock = None
        if driver is not None:
            self.lock = live_lockstep(target.judge.lockstep)(header, driver, "cpu",
                                                             **target.judge.options(impl))
            if self.lock.broken:  # the object's state before its first call
                self._report(self.lock.broken, None, "constructor")

    @property
    def checking(self) -> bool:
        return self.lock is not None and not self.spent

    @property
    def recording(self) -> bool:
        return not self.spent

    def set_header(self, **fields) -> None:
        """A setting first seen in a call (e.g. the scheduler's whole-request check)."""
        self.header = replace(self.header, **fields)
        if self.lock is not None:
            self.lock.trace = self.header

    def trace(self):
        """The calls so far, as the target's trace."""
        return replace(self.header, ops=tuple(self.ops))

    def save(self, directory: str | Path | None = None) -> Path:
        """The trace so far as a corpus file (named by its content) under `directory`; past
        the format's op limit, its first ops (a recording stops there: `full`)."""
        return corpus_files.save(self.target, self.trace(), directory or self.corpus)

    @property
    def full(self) -> bool:
        """A recording at its format's op limit records no more (checking goes on)."""
        return self.lock is None and len(self.ops) >= self.max_ops

    @property
    def max_ops(self) -> int:
        return getattr(self.target.codec, "max_ops", None) or (1 << 62)

    def step(self, op) -> None:
        """Records `op` and, when checking, runs it in lock step: a divergence is saved and
        raised (`Mismatch`)."""
        if not self.recording or self.full:
            return
        self.ops.append(op)
        if not self.checking:
            return
        call, problems = self.lock.step(op)
        if problems:
            self._report(problems, call, None)

    def report(self, op, problems) -> None:
        """`op` recorded as the one that diverged with `problems`, found by the guard outside
        the lock step's own steps (the lock step logged its call)."""
        if self.checking:
            self.ops.append(op)
            self._report(problems, True, None)

    def report_last(self, problems) -> None:
        """`problems` found by the guard after the last op, in a call the trace has no op for
        (its replay finds them at that op or before): reported as that op's."""
        if self.checking:
            self._report(problems, True, None)

    def _report(self, problems, call, where) -> None:
        self.spent = True
        item = self.trace()
        judge = self.target.judge
        if where is None:
            divergence = judge.op_divergence(self.target, item, self.impl, self.lock,
                                             len(item.ops) - 1, call, problems)
        else:
            label = problems[0][0]
            divergence = self.target.divergence(item, self.impl, f"{label} in the {where}",
                                                problems, (where, label))
        if len(item.ops) > self.max_ops:
            divergence = self._shorter(divergence)
            item = divergence.input
        divergence.saved_path = corpus_files.save_or_print(self.target, item, self.corpus,
                                                           sys.stderr)
        self.divergence = divergence
        raise Mismatch(divergence)

    def _shorter(self, divergence):
        """A divergence whose trace is past the format's op limit, shrunk (fresh objects of
        the class, in this process) until a file can hold it; if it cannot be, as it is, with
        a note: its report still says what diverged."""
        from kvfuzz.fuzz.engine.shrink import shrink

        shrunk = shrink(self.target, divergence)
        if len(shrunk.input.ops) > self.max_ops:
            shrunk.lines.append(("note", f"the trace has {len(shrunk.input.ops)} ops, past the "
                                         f"format's {self.max_ops}: no replay reads it"))
        return shrunk



def open_session(target_name: str, obj, header, driver, impl, corpus,
                 on_unsupported: str) -> Session:
    """A guard's session of `obj` (`driver` None: a recording), with its `on_unsupported`
    checked: "raise" or "stop"."""
    if on_unsupported not in ("raise", "stop"):
        raise ValueError(f"on_unsupported is {on_unsupported!r}; expected 'raise' or 'stop'")
    from kvfuzz.fuzz.targets import TARGETS

    target = TARGETS[target_name]
    session = Session(target, header, live_implementation(target, obj, impl), driver, corpus)
    session.on_unsupported = on_unsupported
    return session


def plain_ints(values) -> list[int]:
    """The engine's tensor (or list) as plain ints, whatever its integer dtype."""
    return [int(v) for v in (values.reshape(-1).tolist() if hasattr(values, "reshape")
                             else values)]


def same_args(wanted):
    """A held call's `expected`: the lock step's arguments must be `wanted` (the engine's, in
    plain ints), else the reason they are not."""
    return lambda args: None if tuple(args) == tuple(wanted) else \
        f"the lock step calls with {args}, the engine with {tuple(wanted)}"


def modelled(method):
    """A proxy's method for a call the trace models, run while the session records; once it is
    spent the call goes straight to the object. With `on_unsupported="stop"`, a call the trace
    cannot model stops the session and is made as it is (never twice: a refusal comes before
    the call is made)."""
    def call(self, *args, **kwargs):
        session = self.kvfuzz_session
        if not session.recording:  # spent: every call goes through as it is
            return getattr(self._kvfuzz_object, method.__name__)(*args, **kwargs)
        try:
            return method(self, *args, **kwargs)
        except GuardUnsupported as refused:
            if session.on_unsupported != "stop" or self._kvfuzz_made:
                raise
            session.spent = True
            print(f"{refused}; the guard stops here, calls go through unchecked",
                  file=sys.stderr)
            return getattr(self._kvfuzz_object, method.__name__)(*args, **kwargs)
        finally:
            vars(self)["_kvfuzz_made"] = False
    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class GuardedObject:
    """Stands for a live object (`kvfuzz.guard`, `kvfuzz.record`): the methods a subclass
    declares `@modelled` become ops of `kvfuzz_session` (the trace so far: `.trace()`,
    `.save(directory)`; `.divergence` once one was raised); the names in `READS` and every
    attribute that is not a method go through; any other method is refused."""

    TARGET = ""
    READS: frozenset = frozenset()

    def __init__(self, obj, session: Session, driver):
        state = vars(self)
        state["_kvfuzz_object"], state["kvfuzz_session"] = obj, session
        state["_kvfuzz_driver"] = driver
        state["_kvfuzz_made"] = False          # whether the current call reached the object

    def __repr__(self) -> str:
        return f"kvfuzz.guard({self._kvfuzz_object!r})"

    @property
    def __class__(self):
        """The object's class: an engine's `isinstance(allocator, ItsClass)` holds for the
        proxy too (the proxy's own type is still its guard's)."""
        return type(self._kvfuzz_object)

    def __getattr__(self, name: str):
        value = getattr(self._kvfuzz_object, name)
        if name in self.READS or not callable(value):
            return value

        def refused(*args, **kwargs):
            self._refuse(f"{name}() is not modelled by the {self.TARGET} trace, so the guard "
                         f"cannot check it")
        return refused

    def __setattr__(self, name: str, value) -> None:
        setattr(self._kvfuzz_object, name, value)

    def _refuse(self, why: str):
        raise GuardUnsupported(f"kvfuzz.guard({self.TARGET}): {why}")

    def _count(self, value, call: str, most: int) -> int:
        """A count argument as a plain int, refused outside what the trace holds (0..most)."""
        n = int(value)
        if not 0 <= n <= most:
            self._refuse(f"{call}({n}): outside 0..{most}")
        return n

    def _run(self, op, method: str, perform, expected=lambda args: None):
        """`op` recorded (and checked): the engine's call made when the lock step reaches it;
        what it returns or raises goes back to the engine."""
        driver, session = self._kvfuzz_driver, self.kvfuzz_session
        vars(self)["_kvfuzz_made"] = True  # the call is made below (or its op diverged)
        if not session.checking:
            session.step(op)
            return perform()
        from kvfuzz.impl.live_calls import Pending

        pending = driver.pending = Pending(method, perform, expected)
        driver.mismatch = None
        try:
            session.step(op)  # a divergence raises Mismatch here
        finally:
            driver.pending = None
        if not pending.done:  # no divergence (it raised), yet the op never made the call
            self._refuse(driver.mismatch or f"the trace's {type(op).__name__} op does not make "
                                            f"the engine's {method} call")
        return pending.outcome()
