"""Differential runner for the lazy-compaction allocator: drives the oracle and an implementation
with the same trace, compares every observable value after every op, and checks invariants I1-I11
on the implementation (I12, eager vs lazy, is in `i12.py`).

    found = run_trace(trace, factory)   # factory(params, device) -> the implementation
"""

from __future__ import annotations

import traceback
from collections import Counter
from dataclasses import dataclass, field, fields

from kvfuzz.oracle.compaction.invariants import chain_violations, pool_violations
from kvfuzz.oracle.compaction.model import TAKES, CompactionModel, geometries
from kvfuzz.oracle.compaction.transitions import (alloc_violations, drain_violations,
                                                  flush_violations)
from kvfuzz.strategies.compaction.trace import (Alloc, Drain, Fire, Flush, Forward, Free, Op,
                                                PoolSnapshot, Trace, describe_op)



def oracle_lazy(params, device: str = "cpu") -> CompactionModel:
    """The model itself as a side (lazy, or eager below): the harness tested on itself."""
    return CompactionModel(params, lazy=True)


def oracle_eager(params, device: str = "cpu") -> CompactionModel:
    return CompactionModel(params, lazy=False)


@dataclass
class Found:
    """The first op where the implementation disagreed (`op_index` None: after the last op, in
    I12's final comparison), in which pool, every problem seen there, and the ops before it."""

    op_index: int | None
    pool: str | None
    problems: list[str]
    context: list[str] = field(default_factory=list)

    def label(self) -> str:
        """`up: field p2v differs ...` -> `field p2v`; `down: I4 repeated holes` -> `I4`."""
        if self.problems and self.problems[0].startswith("crash "):
            return "crash"
        words = self.problems[0].split(": ", 1)[-1].split() if self.problems else []
        if words and words[0][:1] == "I" and words[0][1:].isdigit():
            return words[0]
        return " ".join(words[:2])


class Crashed(Exception):
    """The implementation under test raised; carries its exception."""


def guarded(fn, *args, **kwargs):
    """Call into the implementation under test; whatever it raises becomes `Crashed`, so the
    model's own exceptions (harness bugs) are never mistaken for findings."""
    try:
        return fn(*args, **kwargs)
    except (Exception, SystemExit) as error:  # noqa: BLE001
        raise Crashed(error) from error


# What each method of the implementation must return (else it is its fault, never the harness's).
RETURNS = {"snapshot": PoolSnapshot, "read_live": dict, "flush": int, "alloc": (list, type(None))}


def _checked(name: str, value):
    expected = RETURNS.get(name)
    if expected is not None and not isinstance(value, expected):
        error = TypeError(f"{name} returned {type(value).__name__}, expected "
                          f"{getattr(expected, '__name__', 'a list or None')}")
        raise Crashed(error) from error
    return value


class Guarded:
    """The implementation under test, every method call through `guarded`, results checked."""

    def __init__(self, factory, params, device: str):
        self._side = guarded(factory, params, device)
        self.lazy = bool(guarded(getattr, self._side, "lazy"))
        # Which freed pages a lazy allocation reuses, if not the spec's (oracle TAKES).
        self.take = guarded(getattr, self._side, "hole_take", "front")
        if self.take not in TAKES:
            error = ValueError(f"hole_take is {self.take!r}, expected one of {', '.join(TAKES)}")
            raise Crashed(error) from error

    def __getattr__(self, name: str):  # called once per name: the wrapper is kept
        method = guarded(getattr, self._side, name)
        wrapper = self.__dict__[name] = \
            lambda *args, **kwargs: _checked(name, guarded(method, *args, **kwargs))
        return wrapper


def stamp(serial: int, epp: int) -> bytes:
    """A payload no other allocation shares: the serial, little-endian, tiled over the page."""
    word = serial.to_bytes(4, "little")
    return (word * (epp // 4 + 1))[:epp]


def depth_order(snap: PoolSnapshot, up: bool) -> list[int]:
    """Live vids ordered from the pool's base to its frontier."""
    pairs = sorted((page, vid) for vid, page in enumerate(snap.v2p[:-1]) if page > 0)
    return [vid for _, vid in (pairs if up else reversed(pairs))]


class Lockstep:
    """The oracle and one implementation side by side; `step(op)` returns the problems found."""

    def __init__(self, trace: Trace, factory, device: str = "cpu"):
        """`factory(params, device)` builds the implementation under test."""
        self.params = trace.params
        self.impl = Guarded(factory, trace.params, device)
        self.model = CompactionModel(trace.params, lazy=self.impl.lazy, take=self.impl.take)
        self.geos = geometries(trace.params)
        self.stamps = {name: {} for name in self.geos}
        self.serial = 0
        self.next_event = 1
        self.snaps = {name: self.impl.snapshot(name) for name in self.geos}
        self.log: list[str] = []
        self.checked: dict[str, object] = {}  # per pool, and "chain": what was last checked
        self.events: Counter = Counter()  # what the trace exercised (EVENTS), per the model

    def step(self, op: Op) -> tuple[str | None, list[str]]:
        """Apply `op` to both sides; returns (pool, problems), problems empty when all agrees."""
        before = self.snaps
        pool = getattr(op, "pool", None)
        self.log.append(describe_op(op))
        problems = self._apply(op, before)
        self.snaps = {name: self.impl.snapshot(name) for name in self.geos}
        expected = {name: self.model.snapshot(name) for name in self.geos}
        for name in self.geos:
            diffs = compare_snapshots(expected[name], self.snaps[name])
            problems += [f"{name}: {diff}" for diff in diffs]
        self._count(op, before, expected)
        for name, geo in self.geos.items():
            snap, data = checked = (self.snaps[name], self.impl.read_live(name))
            if checked != self.checked.get(name):  # invariants are pure: skip an unchanged pool
                problems += pool_violations(geo, self.impl.lazy, snap, self.stamps[name], data)
                self.checked[name] = checked
        if self.snaps != self.checked.get("chain"):
            problems += chain_violations(self.params, self.impl.lazy, self.snaps)
            self.checked["chain"] = self.snaps
        problems += [f"{pool}: {problem}" for problem in self._transition(op, before, pool)]
        return pool, problems

    def _count(self, op: Op, before: dict, after: dict) -> None:
        kind = type(op).__name__.lower()
        self.events[kind] += 1
        if isinstance(op, Alloc):
            self.events["alloc refused" if self._expected is None else
                        "alloc took holes" if before[op.pool].holes else "alloc"] += 1
        if isinstance(op, Flush):
            moved = self._expected or 0
            self.events[f"{'urgent ' if op.urgent else ''}flush moved "
                        f"{moved if moved < 2 else '2+'}"] += 1
        self.events.update(state for state, on in (
            ("pages pending", any(s.pending_set for s in after.values())),
            ("holes", any(s.holes for s in after.values())),
            ("forward unfired", any(s.inflight for s in after.values()))) if on)

    def _apply(self, op: Op, before: dict[str, PoolSnapshot]) -> list[str]:
        self._result = self._expected = None
        if isinstance(op, Alloc):
            n = max(1, self.model.avail(op.pool) + op.n) if op.relative else op.n
            expected, actual = self.model.alloc(op.pool, n), self.impl.alloc(op.pool, n)
            self._expected = expected
            self._result, self._n = actual, n
            self.log[-1] = f"alloc {op.pool} {n} -> {_short(expected, 60)}"
            if expected != actual:
                return [f"{op.pool}: result of alloc {n}: expected vids {expected}, "
                        f"actual {actual}"]
            if actual:
                self._stamp(op.pool, actual)
        elif isinstance(op, Free):
            vids = op.pick.resolve(depth_order(before[op.pool], self.geos[op.pool].up))
            self.log[-1] = f"free {op.pool} vids {_short(vids, 60)}"
            if vids:
                self.model.free(op.pool, vids)
                self.impl.free(op.pool, vids)
                for vid in vids:
                    del self.stamps[op.pool][vid]
        elif isinstance(op, (Flush, Drain)):
            kind = type(op).__name__.lower()
            expected = self._expected = getattr(self.model, kind)(op.pool, op.urgent)
            actual = getattr(self.impl, kind)(op.pool, op.urgent)
            self._result = actual
            self.log[-1] = describe_op(op) + (f" -> {expected} moves" if kind == "flush" else "")
            if expected != actual:
                return [f"{op.pool}: result of {kind}: expected {expected}, actual {actual}"]
        elif isinstance(op, Forward):
            self._forward(op, before)
        elif isinstance(op, Fire):
            unfired = self.model.unfired()
            chosen = {"oldest": unfired[:1], "newest": unfired[-1:]}.get(op.which, unfired)
            self.log[-1] = f"fire events {chosen}"
            for event in chosen:
                self.model.fire(event)
                self.impl.fire(event)
        return []

    def _forward(self, op: Forward, before: dict[str, PoolSnapshot]) -> None:
        writes = {name: pick.resolve(depth_order(before[name], self.geos[name].up))
                  for name, pick in (("up", op.up), ("down", op.down))
                  if pick is not None and name in self.geos}
        event, self.next_event = self.next_event, self.next_event + 1
        self.log[-1] = f"forward event {event} writes {writes}"
        self.model.forward(event, writes)
        self.impl.forward(event, writes)

    def _stamp(self, name: str, vids: list[int]) -> None:
        payloads = []
        for vid in vids:
            self.serial += 1
            payloads.append(stamp(self.serial, self.geos[name].epp))
            self.stamps[name][vid] = payloads[-1]
        self.model.write(name, vids, payloads)
        self.impl.write(name, vids, payloads)

    def _transition(self, op: Op, before: dict[str, PoolSnapshot], pool: str | None) -> list[str]:
        if isinstance(op, Flush) and self.impl.lazy and isinstance(self._result, int):
            return flush_violations(self.geos[pool], before[pool], self.snaps[pool],
                                    self._result, op.urgent, self.params.move_cap)
        if isinstance(op, Alloc):
            return alloc_violations(before[pool], self.snaps[pool], self._n, self._result)
        if isinstance(op, Drain):
            return drain_violations(before[pool], self.snaps[pool])
        return []


def compare_snapshots(expected: PoolSnapshot, actual: PoolSnapshot) -> list[str]:
    """One line per differing field, with the values (or the differing positions of a table)."""
    if expected == actual:
        return []
    diffs = []
    for name in (f.name for f in fields(PoolSnapshot)):
        want, got = getattr(expected, name), getattr(actual, name)
        if want == got:
            continue
        if name in ("v2p", "p2v", "free_vids") and len(want) == len(got):
            at = [i for i, (w, g) in enumerate(zip(want, got)) if w != g][:6]
            diffs.append(f"field {name} differs at {at}: expected {[want[i] for i in at]}, "
                         f"actual {[got[i] for i in at]}")
        else:
            diffs.append(f"field {name}: expected {_short(want)}, actual {_short(got)}")
    return diffs


def _short(value: object, width: int = 120) -> str:
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= width else text[:width - 3] + "..."


def run_trace(trace: Trace, factory, device: str = "cpu") -> tuple[Found | None, Counter]:
    """Apply every op to the oracle and the implementation; the first op with any problem (a
    crash of the implementation included, with its stack) is the finding. Also: the events
    the trace exercised up to there."""
    lock = None
    for index, op in enumerate(trace.ops):
        try:
            lock = lock or Lockstep(trace, factory, device)
            pool, problems = lock.step(op)
        except Crashed as crash:
            error = crash.__cause__
            pool = getattr(op, "pool", None)
            frames = traceback.format_exception(error)[-3:]
            problems = [f"crash {type(error).__name__}: {error}"] + \
                [line.rstrip() for chunk in frames for line in chunk.splitlines()]
        if problems:
            return Found(index, pool, problems, lock.log[-6:] if lock else []), \
                lock.events if lock else Counter()
    return None, lock.events if lock else Counter()


EVENTS = ("alloc", "free", "flush", "drain", "forward", "fire", "alloc refused",
          "alloc took holes", *(f"{u}flush moved {n}" for u in ("", "urgent ") for n in
                                ("0", "1", "2+")), "pages pending", "holes", "forward unfired")
