"""Stateful differential for hybrid full + sliding-window allocators: drives the oracle
(`oracle.swa`) and an implementation with the same trace, as a scheduler does (each request's
row of full slots, the window cursor below which its SWA slots are released), and compares after
every op: the slots returned, None vs success, the three available sizes, both pools' free lists
(exact order) and staged pages, the full-to-SWA mapping, and the invariants (each pool's pages
partitioned into free, staged, pending and held; the mapping pairing exactly the in-window
tokens). Every call into the implementation is guarded: a raise is a problem to report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from kvfuzz.fuzz.lockstep_calls import call_problems, crash_problems, guarded, list_diff, short
from kvfuzz.impl.driver_calls import POISON
from kvfuzz.impl.swa.driver import SWADriver
from kvfuzz.oracle.allocator.invariants import state_violations
from kvfuzz.oracle.swa.invariants import mapping_violations, swa_holders
from kvfuzz.oracle.swa.model import Rejected, SWAModel
from kvfuzz.strategies.swa.trace import (Admit, Clear, Decode, Evict, Extend, ExtendTail, Finish,
                                         GroupBegin, GroupEnd, Trace)

ALLOCS = ("alloc", "alloc_extend", "alloc_decode", "alloc_extend_swa_tail")


@dataclass
class Call:
    method: str | None          # None: the op changes only the scheduler's tables
    args: tuple
    text: str
    grows: tuple = ()           # (rid, tokens) receiving an allocation's slots, in order
    window_from: int = 0        # alloc_extend_swa_tail: the position the window starts at


class Lockstep:
    """The oracle and one implementation side by side; `step(op)` returns the problems found."""

    def __init__(self, trace: Trace, cls, device: str = "cpu"):
        self.P = trace.page_size
        self.model = SWAModel(trace.size, trace.size_swa, trace.page_size, trace.need_sort)
        self.rows: dict[int, list[int]] = {}    # live requests' full slots, by position
        self.evicted: dict[int, int] = {}       # positions below this have no SWA slot
        self.seen: set[int] = set()             # rids ever used: never admitted twice
        self.log: list[str] = []
        self.events: Counter = Counter()        # target.EVENTS: calls and their edge classes
        self.impl, raised = guarded(SWADriver, cls, trace.size, trace.size_swa, trace.page_size,
                                    trace.need_sort, device)
        self.broken = crash_problems(raised, "constructor") if raised else []

    def step(self, op) -> tuple[str | None, list[tuple[str, str]]]:
        if self.broken:
            return None, self.broken
        call = self._resolve(op)
        if call is None:
            return None, []
        self._count(op, call)
        if call.method is None:
            self.log.append(call.text)
            return call.text, []
        expected, rejected = _run(self.model, call)
        actual, raised = guarded(_call, self.impl, call)
        problems = call_problems(call.method in ALLOCS, expected, rejected, actual, raised)
        if raised is None and rejected is None:
            self._commit(op, call, actual)
        state, raised = guarded(self.impl.state)
        problems += crash_problems(raised, "state read") if raised else self._state(state)
        if problems and any(str(POISON) in text for _, text in problems):
            problems.append(("ownership", f"slot {POISON} is what the caller wrote over every "
                                          f"tensor it passed in, after the call: the allocator "
                                          f"kept a caller's tensor, not a copy"))
        self.log.append(f"{call.text} -> "
                        + (short(expected) if rejected is None else f"rejected ({rejected})"))
        return call.text, problems

    # --- what an op stands for ---------------------------------------------------------------
    def _resolve(self, op) -> Call | None:
        if isinstance(op, Admit):
            if op.rid in self.seen:
                return None
            self.seen.add(op.rid)
            self.rows[op.rid], self.evicted[op.rid] = [], 0
            return Call(None, (), f"admit r{op.rid}")
        if isinstance(op, Extend):
            grows = tuple((r, n) for r, n in dict(zip(op.rids, op.lens)).items() if r in self.rows)
            return self._grow(grows, "extend") if grows else None
        if isinstance(op, ExtendTail):
            return self._extend_tail(op)
        if isinstance(op, Decode):
            rids = [r for r in dict.fromkeys(op.rids or sorted(self.rows)) if self.rows.get(r)]
            if not rids:
                return None
            grows = tuple((r, 1) for r in rids)
            seq = [len(self.rows[r]) + 1 for r in rids]
            if op.checked and self.P > 1 and not self.model.would_decode(seq):
                return Call(None, (), "decode skipped: a pool has no room (the scheduler checks)")
            return self._grow(grows, "decode")
        if isinstance(op, Evict):
            return self._evict(op)
        if isinstance(op, Finish):
            return self._finish(op)
        if isinstance(op, GroupBegin):
            return Call("group_begin", (), "free_group_begin()")
        if isinstance(op, GroupEnd):
            return Call("group_end", (), "free_group_end()")
        if isinstance(op, Clear):
            return Call("clear", (), "clear()")
        return None

    def _grow(self, grows, kind: str) -> Call:
        who = " ".join(f"r{r}+{n}" for r, n in grows)
        if self.P == 1:
            n = sum(tokens for _, tokens in grows)
            return Call("alloc", (n,), f"alloc({n}) to {kind} {who}", grows)
        prefix = [len(self.rows[r]) for r, _ in grows]
        seq = [q + n for q, (_, n) in zip(prefix, grows)]
        last = [self.rows[r][-1] if self.rows[r] else -1 for r, _ in grows]
        if kind == "decode":
            return Call("alloc_decode", (seq, last),
                        f"alloc_decode(seq_lens={seq}, last_loc={last})", grows)
        return Call("alloc_extend", (prefix, seq, last),
                    f"alloc_extend(prefix_lens={prefix}, seq_lens={seq}, last_loc={last})", grows)

    def _extend_tail(self, op: ExtendTail) -> Call | None:
        """Only for a request with no tokens yet, at page size 2 and up (upstream's use)."""
        if self.P == 1 or self.rows.get(op.rid) != []:
            return None
        start = max(0, op.len - max(op.tail, 1)) // self.P * self.P  # a page boundary
        tail = op.len - start
        return Call("alloc_extend_swa_tail", ([0], [op.len], [-1], tail),
                    f"alloc_extend_swa_tail(seq_lens=[{op.len}], swa_tail_len={tail}) for "
                    f"r{op.rid}", ((op.rid, op.len),), start)

    def _evict(self, op: Evict) -> Call | None:
        row = self.rows.get(op.rid)
        if row is None:
            return None
        start, end = self.evicted[op.rid], max(0, len(row) - op.keep) // self.P * self.P
        if end <= start:
            return None
        slots = row[start:end]
        if op.how == "segment":
            return Call("free_swa_segment", (slots, start),
                        f"window of r{op.rid} to {end}: free_swa_segment({short(slots, 60)}, "
                        f"start_pos={start})")
        return Call("free_swa", (slots,), f"window of r{op.rid} to {end}: "
                                          f"free_swa({short(slots, 60)})")

    def _finish(self, op: Finish) -> Call | None:
        row = self.rows.get(op.rid)
        if row is None:
            return None
        start = self.evicted[op.rid]
        dead, live = row[:start], row[start:]
        if not row:  # nothing to release: the scheduler only forgets it
            del self.rows[op.rid], self.evicted[op.rid]
            return Call(None, (), f"finish r{op.rid} (no tokens)")
        names = ("free_full_segment", "free_segment") if op.how == "segment" else \
            ("free_full", "free")
        return Call("finish", (dead, live, start, op.how == "segment"),
                    f"finish r{op.rid}: {names[0]}({short(dead, 40)}), "
                    f"{names[1]}({short(live, 40)})")

    # --- after the call -----------------------------------------------------------------------
    def _commit(self, op, call: Call, actual) -> None:
        if call.method in ALLOCS and actual is not None:
            at = 0
            for rid, n in call.grows:
                self.rows[rid] += actual[at:at + n]
                at += n
            if call.method == "alloc_extend_swa_tail":
                self.evicted[call.grows[0][0]] = call.window_from
        elif call.method in ("free_swa", "free_swa_segment"):
            row = self.rows[op.rid]
            self.evicted[op.rid] = max(0, len(row) - op.keep) // self.P * self.P
        elif call.method == "finish":
            del self.rows[op.rid], self.evicted[op.rid]
        elif call.method == "clear":
            self.rows, self.evicted = {}, {}

    def _count(self, op, call: Call) -> None:
        model, events = self.model, self.events
        if call.method in ALLOCS:
            need = call.args[0] if call.method == "alloc" else self.P * (
                sum((s - 1) % self.P == 0 for s in call.args[0]) if call.method == "alloc_decode"
                else _extend_pages(call.args[0], call.args[1], self.P))
            swa_need = need if call.method != "alloc_extend_swa_tail" else \
                -(-call.args[3] // self.P) * self.P
            full_ok = need <= model.full.available_size()
            swa_ok = swa_need <= model.swa.available_size()
            events[f"{call.method} " + ("ok" if full_ok and swa_ok else "None")] += 1
            if full_ok != swa_ok:
                events[f"short on the {'SWA' if full_ok else 'full'} pool only"] += 1
        elif call.method is None:
            events["decode skipped"] += isinstance(op, Decode)
        elif call.method == "group_begin":
            events["nested group begin" if model.group_open else "group begin"] += 1
        elif call.method == "group_end":
            events["group end" if model.group_open else "stray group end"] += 1
        else:
            label = call.method if call.method != "finish" else \
                "finish segment" if call.args[3] else "finish"
            events[label + (" in a group" if model.group_open else "")] += 1

    def _state(self, state: dict) -> list[tuple[str, str]]:
        model, problems = self.model, []
        expected = {"available_size": model.available_size(),
                    "full_available_size": model.full.available_size(),
                    "swa_available_size": model.swa.available_size()}
        for name, value in expected.items():
            if state[name] != value:
                problems.append((name, f"expected {value}, actual {state[name]}"))
        for pool, side in (("full", model.full), ("swa", model.swa)):
            if state[f"{pool} free"] != side.free:
                problems.append((f"{pool} free list", list_diff(side.free, state[f"{pool} free"])))
            if Counter(state[f"{pool} staged"]) != Counter(side.staged):
                problems.append((f"{pool} staged pages",
                                 f"expected {short(sorted(side.staged))}, actual "
                                 f"{short(sorted(state[f'{pool} staged']))} (as multisets)"))
        if state["mapping"] != model.mapping:
            problems.append(("mapping", _mapping_diff(model.mapping, state["mapping"])))
        return problems + [("invariant", text) for text in self._invariants(state)]

    def _invariants(self, state: dict) -> list[str]:
        model, P = self.model, self.P
        found = []
        for pool, side in (("full", model.full), ("swa", model.swa)):
            capacity = side.num_pages * P
            if state[f"{pool}_available_size"] > capacity:
                found.append(f"{pool} available size {state[f'{pool}_available_size']} exceeds "
                             f"the capacity {capacity}")
        full_holders: dict[int, set[int]] = {}
        for rid, row in self.rows.items():
            for slot in row:
                full_holders.setdefault(slot // P, set()).add(rid)
        swa_pending = model.swa_page_ids_group + sorted({s // P for s in model.swa_free_group
                                                         if s > 0})
        found += [f"full pool: {text}" for text in state_violations(
            model.full.num_pages, state["full free"], state["full staged"],
            model.full.pending_pages(), full_holders)]
        found += [f"SWA pool: {text}" for text in state_violations(
            model.swa.num_pages, state["swa free"], state["swa staged"], swa_pending,
            swa_holders(state["mapping"], self.rows, self.evicted, P))]
        return found + mapping_violations(state["mapping"], self.rows, self.evicted, P)


def _extend_pages(prefix, seq, P: int) -> int:
    return sum((s + P - 1) // P - (q + P - 1) // P for q, s in zip(prefix, seq))


def _mapping_diff(expected: dict, actual: dict) -> str:
    keys = sorted(set(expected) | set(actual))
    wrong = [k for k in keys if expected.get(k, 0) != actual.get(k, 0)]
    shown = ", ".join(f"{k}: {expected.get(k, 0)} vs {actual.get(k, 0)}" for k in wrong[:5])
    return f"{len(wrong)} full slots map differently (full slot: expected vs actual SWA slot, " \
           f"0 = none): {shown}"


def _run(model: SWAModel, call: Call):
    try:
        return _call(model, call), None
    except Rejected as error:
        return None, error


def _call(side, call: Call):
    if call.method == "finish":
        dead, live, start, segment = call.args
        if segment:
            side.free_full_segment(dead, 0)
            side.free_segment(live, start)
        else:
            side.free_full(dead)
            side.free(live)
        return None
    return getattr(side, call.method)(*call.args)
