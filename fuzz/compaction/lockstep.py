"""The lazy-compaction judge on the shared lock step (`kvfuzz.fuzz.engine.lockstep`): the oracle and
an implementation driven with the same trace, every observable value compared after every op (each
pool's watermark, counters, holes, pending sets, free vids, `v2p` and `p2v`), the KV content checked
against what was written, invariants I1-I11 run on the implementation, and, at the end of a lazy
implementation's trace, I12 (eager vs lazy, `i12.py`).

The implementation is a factory `factory(params, device)` (kvfuzz/impl/compaction/allocator.py gives
the interface), called through `sides.CheckedSide`: a result of the wrong type is its fault."""

from __future__ import annotations

import re
from dataclasses import fields

from kvfuzz.fuzz.compaction import loadback
from kvfuzz.fuzz.compaction.loadback import pages_of_tokens
from kvfuzz.fuzz.compaction.i12 import check_i12
from kvfuzz.fuzz.compaction.sides import CheckedSide, depth_order, stamp
from kvfuzz.fuzz.engine.lockstep import (Call, ImplementationRaised, Lockstep, crash_problems,
                                         handles, short)
from kvfuzz.oracle.compaction.invariants import chain_violations, pool_violations
from kvfuzz.oracle.compaction.model import CompactionModel, Refused, geometries
from kvfuzz.oracle.compaction.tokens import pages_named, tokens_of
from kvfuzz.oracle.compaction.transitions import (alloc_violations, drain_violations,
                                                  flush_violations)
from kvfuzz.strategies.compaction import trace as compaction
from kvfuzz.strategies.compaction.trace import (Alloc, Clear, Drain, Fire, Flush, Forward, Free,
                                                GroupBegin, GroupEnd, PoolSnapshot)


class CompactionLockstep(loadback.LoadBackOps, Lockstep):
    KINDS = compaction.KINDS
    EVENTS = ("alloc", "free", "flush", "drain", "forward", "fire", "alloc refused",
              "alloc took holes", *(f"{u}flush moved {n}" for u in ("", "urgent ") for n in
                                    ("0", "1", "2+")), "pages pending", "holes",
              "forward unfired", "clear", "clear with pages pending", "clear with holes",
              "free group", "free in a group", "free group nested", "free group end unopened",
              "clear in a free group", *loadback.EVENTS)
    REJECTIONS = (Refused,)  # a nested free_group_begin: the implementation must refuse it too

    def build_impl(self, trace, factory, device, eager=None):
        """`eager`: the factory I12 compares a lazy implementation with (None: no I12)."""
        self.factory, self.eager, self.device = factory, eager, device
        return CheckedSide(factory, trace.params, device)

    def build_model(self, trace):
        self.params, self.geos = trace.params, geometries(trace.params)
        self.stamps = {name: {} for name in self.geos}
        self.serial, self.next_event = 0, 1
        self.checked: dict[str, object] = {}  # per pool, and "chain": what was last checked
        self.result = None                    # what the op's compared call returned
        impl = self.impl  # built first: the model follows what it declares (lazy, take)
        self.zeroes = bool(getattr(impl, "zeroes", False))
        return CompactionModel(trace.params, lazy=getattr(impl, "lazy", True),
                               take=getattr(impl, "take", "front"))

    def initial_problems(self):
        """The state as built, compared and checked like the state after an op: ops resolve
        their picks against the implementation's live pages, which must be the model's."""
        return self._state_problems()

    # -- ops ----------------------------------------------------------------------------------
    @handles(Alloc)
    def alloc(self, op: Alloc):
        model, pool = self.model, op.pool
        n = max(1, model.avail(pool) + op.n) if op.relative else op.n
        holes = bool(self.snaps[pool].holes)
        size = self.params.page_size  # the call takes and returns tokens (`tokens.py`)
        vids = []

        def answer():
            expected = model.alloc(pool, n)
            self.count("alloc")
            self.count("alloc refused" if expected is None else
                       "alloc took holes" if holes else "alloc")
            vids[:] = expected or []
            return None if expected is None else tokens_of(expected, size)

        def compare(expected, rejected, actual, raised):
            if raised is not None:
                return crash_problems(raised)
            unit = "vids" if size == 1 else "tokens"
            return [] if expected == actual else [
                ("result", f"{pool}: result of alloc {n}{pages_of_tokens(size)}: expected {unit} "
                           f"{expected}, actual {actual}")]
        self.result, self.n = None, n
        result = yield Call(f"alloc {pool} {n}{pages_of_tokens(size)}", "alloc", (pool, n * size),
                            oracle=answer, compared=True, compare=compare)
        self.result = None if result.actual is None else pages_named(result.actual, size)
        if result.actual and result.actual == result.expected:  # stamped where both agree
            problems = []
            if self.zeroes:  # read before the stamp: what a kernel would load from a fresh page
                data = (yield Call("", "read_vids", (pool, vids), oracle=None)).actual
                problems = unzeroed(pool, vids, data, self.geos[pool].epp)
            yield from self._stamp(pool, list(vids))
            return problems

    @handles(Free)
    def free(self, op: Free):
        """Picks resolve against the live vids not already freed in an open free group (those
        stay bound, and their stamps kept, until the group ends)."""
        group = self.snaps[op.pool].group
        live = depth_order(self.snaps[op.pool], self.geos[op.pool].up)
        deferred = set(group or ())
        vids = op.pick.resolve([vid for vid in live if vid not in deferred])
        self.count("free")
        if group is not None:
            self.count("free in a group")
        yield Call(f"free {op.pool} vids {short(vids, 60)}"
                   + (" (deferred: free group open)" if group is not None else ""))
        if vids:  # the call names every token of each page (`free` takes tokens)
            yield Call("", "free", (op.pool, tokens_of(vids, self.params.page_size)),
                       oracle=lambda: self.model.free(op.pool, vids))
            if group is None:
                for vid in vids:
                    del self.stamps[op.pool][vid]

    @handles(GroupBegin)
    def group_begin(self, op: GroupBegin):
        nested = self.snaps[op.pool].group is not None
        self.count("free group nested" if nested else "free group")
        yield Call(f"free_group_begin {op.pool}", "free_group_begin", (op.pool,))

    @handles(GroupEnd)
    def group_end(self, op: GroupEnd):
        deferred = self.model.pools[op.pool].group
        if deferred is None:
            self.count("free group end unopened")
        yield Call(f"free_group_end {op.pool} frees {short(deferred or [], 60)}",
                   "free_group_end", (op.pool,))
        for vid in deferred or ():
            del self.stamps[op.pool][vid]

    @handles(Flush, Drain)
    def flush(self, op):
        kind = type(op).__name__.lower()

        def answer():
            if kind == "flush" and self.model.lazy and self.model.pools[op.pool].reservations:
                self.count("flush blocked by a reservation")
            expected = getattr(self.model, kind)(op.pool, op.urgent)
            self.count(kind)
            if kind == "flush":
                self.count(f"{'urgent ' if op.urgent else ''}flush moved "
                           f"{expected if expected < 2 else '2+'}")
            return expected

        def compare(expected, rejected, actual, raised):
            if raised is not None:
                return crash_problems(raised)
            return [] if expected == actual else [
                ("result", f"{op.pool}: result of {kind}: expected {expected}, "
                           f"actual {actual}")]
        self.result = None
        urgency = "urgent " if op.urgent else ""
        self.result = (yield Call(f"{urgency}{kind} {op.pool}", kind, (op.pool, op.urgent),
                                  oracle=answer, compared=kind == "flush",
                                  compare=compare)).actual

    @handles(Forward)
    def forward(self, op: Forward):
        writes = {name: pick.resolve(depth_order(self.snaps[name], self.geos[name].up))
                  for name, pick in (("up", op.up), ("down", op.down))
                  if pick is not None and name in self.geos}
        event, self.next_event = self.next_event, self.next_event + 1
        self.count("forward")
        yield Call(f"forward event {event} writes {writes}", "forward", (event, writes),
                   oracle=lambda: self.model.forward(event, writes))

    @handles(Fire)
    def fire(self, op: Fire):
        unfired = self.model.unfired()
        chosen = {"oldest": unfired[:1], "newest": unfired[-1:]}.get(op.which, unfired)
        self.count("fire")
        yield Call(f"fire events {chosen}")
        for event in chosen:
            yield Call("", "fire", (event,), oracle=lambda event=event: self.model.fire(event))

    @handles(Clear)
    def clear(self, op: Clear):
        """Each pool named (all, for a cache flush), one `clear(pool)` call each; what a pool
        held is gone, so are its stamps (I7 then expects no live vid)."""
        names = [op.pool] if op.pool else list(self.geos)
        self.count("clear")
        for event, field in (("clear with pages pending", "pending_set"),
                             ("clear with holes", "holes"),
                             ("clear with pages reserved", "reserved")):
            if any(getattr(self.snaps[name], field) for name in names):
                self.count(event)
        if any(self.snaps[name].group is not None for name in names):
            self.count("clear in a free group")
        yield Call(f"clear {', '.join(names)}")
        for name in names:
            yield Call("", "clear", (name,), oracle=lambda name=name: self.model.clear(name))
            self.stamps[name] = {}

    def _stamp(self, name: str, vids: list[int]):
        payloads = []
        for vid in vids:
            self.serial += 1
            payloads.append(stamp(self.serial, self.geos[name].epp))
            self.stamps[name][vid] = payloads[-1]
        yield Call("", "write", (name, vids, payloads),
                   oracle=lambda: self.model.write(name, vids, payloads))

    # -- after the op -------------------------------------------------------------------------
    def state(self, op) -> list[tuple[str, str]]:
        before = self.snaps
        problems = self._state_problems()
        pool = getattr(op, "pool", None)
        found = [f"{pool}: {text}" for text in self._transition(op, before, pool)]
        return problems + [(invariant_of(text), text) for text in found]

    def _state_problems(self) -> list[tuple[str, str]]:
        """Each pool read, compared with the model and checked (I1-I8, I10)."""
        self.snaps = {name: self.read("snapshot", name) for name in self.geos}
        expected = {name: self.model.snapshot(name) for name in self.geos}
        problems = []
        for name in self.geos:
            problems += [(label, f"{name}: {text}")
                         for label, text in compare_snapshots(expected[name], self.snaps[name])]
        for event, on in (("pages pending", any(s.pending_set for s in expected.values())),
                          ("holes", any(s.holes for s in expected.values())),
                          ("forward unfired", any(s.inflight for s in expected.values())),
                          ("pages reserved", any(s.reserved for s in expected.values()))):
            if on:
                self.count(event)
        found = []
        for name, geo in self.geos.items():
            snap, data = checked = (self.snaps[name], self.read("read_live", name))
            if checked != self.checked.get(name):  # invariants are pure: skip an unchanged pool
                found += pool_violations(geo, self.model.lazy, snap, self.stamps[name], data)
                self.checked[name] = checked
        if self.snaps != self.checked.get("chain"):
            found += chain_violations(self.params, self.model.lazy, self.snaps)
            self.checked["chain"] = self.snaps
        return problems + [(invariant_of(text), text) for text in found]

    def _transition(self, op, before: dict, pool) -> list[str]:
        if isinstance(op, Flush) and self.model.lazy and isinstance(self.result, int):
            return flush_violations(self.geos[pool], before[pool], self.snaps[pool],
                                    self.result, op.urgent, self.params.move_cap)
        if isinstance(op, Alloc):
            return alloc_violations(before[pool], self.snaps[pool], self.n, self.result)
        if isinstance(op, Drain):
            return drain_violations(before[pool], self.snaps[pool])
        return []

    def finish(self) -> list[tuple[str, str]]:
        """I12, for a lazy implementation when the target gave the eager reference."""
        if self.eager is None or not self.model.lazy:
            return []
        try:
            return check_i12(self.trace, self.factory, self.eager, self.device)
        except ImplementationRaised as raised:
            return crash_problems(raised.error, "I12 run")


INVARIANT = re.compile(r"\b(I\d+)\b")


def invariant_of(text: str) -> str:
    """The invariant a violation names: the oracle's messages lead with its id (I1-I12)."""
    found = INVARIANT.search(text)
    return found.group(1) if found else "invariant"


def compare_snapshots(expected: PoolSnapshot, actual: PoolSnapshot) -> list[tuple[str, str]]:
    """One (field label, text) per differing field, with the values (or the differing positions
    of a table)."""
    if expected == actual:
        return []
    diffs = []
    for name in (f.name for f in fields(PoolSnapshot)):
        want, got = getattr(expected, name), getattr(actual, name)
        if want == got:
            continue
        if name in ("v2p", "p2v", "free_vids") and len(want) == len(got):
            at = [i for i, (w, g) in enumerate(zip(want, got)) if w != g][:6]
            diffs.append((f"field {name}", f"field {name} differs at {at}: expected "
                                           f"{[want[i] for i in at]}, actual "
                                           f"{[got[i] for i in at]}"))
        else:
            diffs.append((f"field {name}", f"field {name}: expected {_short(want)}, actual "
                                           f"{_short(got)}"))
    return diffs


def _short(value: object, width: int = 120) -> str:
    return short(list(value) if isinstance(value, tuple) else value, width)


def unzeroed(pool: str, vids: list[int], data: dict, epp: int) -> list[tuple[str, str]]:
    """An implementation that declares `zeroes_new_pages`: every page an allocation hands out
    reads zero before anything is written to it."""
    zero = bytes(epp)
    wrong = [vid for vid in vids if data.get(vid, zero) != zero]
    return [("fresh page", f"{pool}: alloc handed out vid {vid}, which reads "
                           f"{data[vid][:8].hex()}... before any write, not zeros")
            for vid in wrong[:2]]

