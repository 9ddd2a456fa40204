"""The hybrid full + sliding-window allocator judge on the shared lock step
(`kvfuzz.fuzz.engine.lockstep`): the oracle (`oracle.swa`) and an implementation driven as a
scheduler drives them (each request's row of full slots, the window cursor below which its SWA slots
are released), compared after every op: the slots returned, None vs success, the three available
sizes, both pools' free lists (exact order) and staged pages, the full-to-SWA mapping, and the
invariants (each pool's pages partitioned into free, staged, pending and held; the mapping pairing
exactly the in-window tokens)."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.engine.lockstep import POISON, Call, Lockstep, handles, list_diff, short
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.oracle.allocator.invariants import ENGINE, state_violations
from kvfuzz.oracle.swa.invariants import (freed_peer_violations, mapping_violations,
                                         swa_holders)
from kvfuzz.oracle.swa.model import Rejected, SWAModel
from kvfuzz.strategies.swa import trace as swa
from kvfuzz.strategies.swa.trace import (RELEASES, Admit, AllocSlots, Clear, ClearMapping, Decode,
                                         DecodeSlots, Evict, Extend, ExtendSlots, ExtendTail,
                                         ExtendTailSlots, Finish, FreeSegments, FreeSlots,
                                         GroupBegin, GroupEnd, SetMapping, describe_slot_op)

ALLOCS = ("alloc", "alloc_extend", "alloc_decode", "alloc_extend_swa_tail")


class SWALockstep(Lockstep):
    KINDS = swa.KINDS
    EVENTS = (*(f"{m} {how}" for m in ALLOCS for how in ("ok", "None")),
              "short on the full pool only", "short on the SWA pool only", "decode skipped",
              "free_swa", "free_swa in a group", "free_swa_segment", "free_swa_segment in a group",
              "finish", "finish in a group", "finish segment", "finish segment in a group",
              "group begin", "nested group begin", "group end", "stray group end", "clear",
              "clear in a group")
    REJECTIONS = (Rejected,)
    OWNERSHIP = (f"slot {POISON} is what the caller wrote over every tensor it passed in, after "
                 f"the call: the allocator kept a caller's tensor, not a copy")

    def build_model(self, trace):
        self.P = trace.page_size
        self.rows: dict[int, list[int]] = {}    # live requests' full slots, by position
        self.evicted: dict[int, int] = {}       # positions below this have no SWA slot
        self.seen: set[int] = set()             # rids ever used: never admitted twice
        # A live guard's by-slot calls: the full pages the engine holds, and its full slots
        # whose SWA peer it holds (what the mapping must pair, beside the requests' windows).
        self.engine_pages: set[int] = set()
        self.engine_window: set[int] = set()
        # SWA slots whose full slots' mapping the op just cleared: held by the engine until
        # its next call (SGLang's prefix cache moves a peer as a clear, then a set).
        self.transit: tuple = (None, set())  # (the op, its slots): checked after that op only
        # Full slots the op released on the full side while still mapped: their peers must be
        # released by the engine's next call (SGLang's unified cache frees a tree value's full
        # slots, then its SWA peers, reading the mapping), else they are a free slot's peer.
        self.freed_mapped: tuple = (None, set())
        self.allowed: dict = {}
        return SWAModel(trace.size, trace.size_swa, trace.page_size, trace.need_sort)

    def build_impl(self, trace, cls, device):
        from kvfuzz.impl.swa.driver import SWADriver  # imports torch

        return make(SWADriver, cls, trace.size, trace.size_swa, trace.page_size, trace.need_sort,
                         device)

    # --- what an op stands for ---------------------------------------------------------------
    @handles(Admit)
    def admit(self, op: Admit):
        if op.rid in self.seen:
            return
        self.seen.add(op.rid)
        self.rows[op.rid], self.evicted[op.rid] = [], 0
        yield Call(f"admit r{op.rid}")

    @handles(Extend)
    def extend(self, op: Extend):
        grows = tuple((r, n) for r, n in dict(zip(op.rids, op.lens)).items() if r in self.rows)
        if grows:
            yield from self._grow(grows, "extend")

    @handles(Decode)
    def decode(self, op: Decode):
        rids = [r for r in dict.fromkeys(op.rids or sorted(self.rows)) if self.rows.get(r)]
        if not rids:
            return
        seq = [len(self.rows[r]) + 1 for r in rids]
        if op.checked and self.P > 1 and not self.model.would_decode(seq):
            self.count("decode skipped")
            yield Call("decode skipped: a pool has no room (the scheduler checks)")
            return
        yield from self._grow(tuple((r, 1) for r in rids), "decode")

    def _grow(self, grows, kind: str):
        who = " ".join(f"r{r}+{n}" for r, n in grows)
        if self.P == 1:
            n = sum(tokens for _, tokens in grows)
            call = Call(f"alloc({n}) to {kind} {who}", "alloc", (n,), compared=True)
        else:
            prefix = [len(self.rows[r]) for r, _ in grows]
            seq = [q + n for q, (_, n) in zip(prefix, grows)]
            last = [self.rows[r][-1] if self.rows[r] else -1 for r, _ in grows]
            call = Call(f"alloc_decode(seq_lens={seq}, last_loc={last})", "alloc_decode",
                        (seq, last), compared=True) if kind == "decode" else \
                Call(f"alloc_extend(prefix_lens={prefix}, seq_lens={seq}, last_loc={last})",
                     "alloc_extend", (prefix, seq, last), compared=True)
        self._count_alloc(call)
        got = (yield call).actual
        self._append(grows, got)

    def _append(self, grows, got) -> None:
        if got is not None:
            at = 0
            for rid, n in grows:
                self.rows[rid] += got[at:at + n]
                at += n

    @handles(ExtendTail)
    def extend_tail(self, op: ExtendTail):
        """Only for a request with no tokens yet, at page size 2 and up (upstream's use)."""
        if self.P == 1 or self.rows.get(op.rid) != []:
            return
        start = max(0, op.len - max(op.tail, 1)) // self.P * self.P  # a page boundary
        tail = op.len - start
        call = Call(f"alloc_extend_swa_tail(seq_lens=[{op.len}], swa_tail_len={tail}) for "
                    f"r{op.rid}", "alloc_extend_swa_tail", ([0], [op.len], [-1], tail),
                    compared=True)
        self._count_alloc(call)
        got = (yield call).actual
        self._append(((op.rid, op.len),), got)
        if got is not None:
            self.evicted[op.rid] = start

    @handles(Evict)
    def evict(self, op: Evict):
        row = self.rows.get(op.rid)
        if row is None:
            return
        start, end = self.evicted[op.rid], max(0, len(row) - op.keep) // self.P * self.P
        if end <= start:
            return
        slots = row[start:end]
        group = " in a group" if self.model.group_open else ""
        if op.how == "segment":
            self.count("free_swa_segment" + group)
            yield Call(f"window of r{op.rid} to {end}: free_swa_segment({short(slots, 60)}, "
                       f"start_pos={start})", "free_swa_segment", (slots, start))
        else:
            self.count("free_swa" + group)
            yield Call(f"window of r{op.rid} to {end}: free_swa({short(slots, 60)})",
                       "free_swa", (slots,))
        self.evicted[op.rid] = end

    @handles(Finish)
    def finish_request(self, op: Finish):
        row = self.rows.get(op.rid)
        if row is None:
            return
        start = self.evicted[op.rid]
        dead, live = row[:start], row[start:]
        if not row:  # nothing to release: the scheduler only forgets it
            del self.rows[op.rid], self.evicted[op.rid]
            yield Call(f"finish r{op.rid} (no tokens)")
            return
        segment = op.how == "segment"
        names = ("free_full_segment", "free_segment") if segment else ("free_full", "free")
        self.count(("finish segment" if segment else "finish")
                   + (" in a group" if self.model.group_open else ""))
        text = (f"finish r{op.rid}: {names[0]}({short(dead, 40)}), "
                f"{names[1]}({short(live, 40)})")
        if segment:  # the tokens out of the window, then those in it (upstream's release)
            yield Call(text, "free_full_segment", (dead, 0))
            yield Call("", "free_segment", (live, start))
        else:
            yield Call(text, "free_full", (dead,))
            yield Call("", "free", (live,))
        del self.rows[op.rid], self.evicted[op.rid]

    @handles(GroupBegin)
    def group_begin(self, op: GroupBegin):
        self.count("nested group begin" if self.model.group_open else "group begin")
        yield Call("free_group_begin()", "group_begin")

    @handles(GroupEnd)
    def group_end(self, op: GroupEnd):
        self.count("group end" if self.model.group_open else "stray group end")
        yield Call("free_group_end()", "group_end")

    @handles(Clear)
    def clear(self, op: Clear):
        self.count("clear in a group" if self.model.group_open else "clear")
        yield Call("clear()", "clear")
        self.rows, self.evicted = {}, {}
        self.engine_pages, self.engine_window = set(), set()

    # --- a live guard's by-slot calls (the engine's own; `fuzz/swa/guard.py`) -----------------
    @handles(AllocSlots)
    def alloc_slots(self, op: AllocSlots):
        if self.P == 1:  # upstream's contract: alloc at page size 1 only
            yield from self._engine_alloc(op, "alloc", (op.need_size,))

    @handles(ExtendSlots)
    def extend_slots(self, op: ExtendSlots):
        if self.P > 1 and all(0 <= q <= s for q, s in zip(op.prefix_lens, op.seq_lens)):
            yield from self._engine_alloc(op, "alloc_extend", (
                list(op.prefix_lens), list(op.seq_lens), list(op.last_loc)))

    @handles(ExtendTailSlots)
    def extend_tail_slots(self, op: ExtendTailSlots):
        if self.P > 1 and 0 <= op.prefix_len <= op.seq_len and \
                op.tail <= op.seq_len - op.prefix_len and (op.seq_len - op.tail) % self.P == 0:
            yield from self._engine_alloc(op, "alloc_extend_swa_tail", (
                [op.prefix_len], [op.seq_len], [op.last_loc], op.tail), tail=op.tail)

    @handles(DecodeSlots)
    def decode_slots(self, op: DecodeSlots):
        if self.P > 1 and all(s >= 1 for s in op.seq_lens):
            yield from self._engine_alloc(op, "alloc_decode",
                                          (list(op.seq_lens), list(op.last_loc)))

    def _engine_alloc(self, op, method: str, args: tuple, tail: int | None = None):
        """Outside the contract (the wrong page size, a length below its prefix) is no call:
        the guard refuses those before they are made."""
        call = Call(describe_slot_op(op), method, args, compared=True)
        self._count_alloc(call)
        got = (yield call).actual
        if got is not None:
            self.engine_pages |= {slot // self.P for slot in got}
            self.engine_window |= set(got if tail is None else got[len(got) - tail:])

    @handles(FreeSlots, FreeSegments)
    def free_engine_slots(self, op):
        segmented = isinstance(op, FreeSegments)
        args = (op.segments(),) if segmented else (list(op.slots),)
        yield Call(describe_slot_op(op), RELEASES[op.pools, segmented], args)
        # the pages released: each segment's by its page representatives, as upstream's
        reps = [slot for slots, _ in args[0] for slot in slots[::self.P]] if segmented \
            else op.slots
        pages = {slot // self.P for slot in reps}
        if op.pools in ("both", "swa"):  # the SWA peers of every slot of those pages
            self.engine_window = {slot for slot in self.engine_window
                                  if slot // self.P not in pages}
        if op.pools in ("both", "full", "full_pool"):
            self.engine_pages -= pages
        if op.pools in ("full", "full_pool"):
            self.freed_mapped = (op, {slot for slot in op.slots if self.model.mapping.get(slot)})

    @handles(SetMapping)
    def set_mapping(self, op: SetMapping):
        yield Call(describe_slot_op(op), "set_mapping", (list(op.full), list(op.swa)))
        for full, peer in zip(op.full, op.swa):
            (self.engine_window.add if peer else self.engine_window.discard)(full)

    @handles(ClearMapping)
    def clear_mapping(self, op: ClearMapping):
        peers = {self.model.mapping.get(full, 0) for full in op.full} - {0}
        yield Call(describe_slot_op(op), "clear_mapping", (list(op.full),))
        self.engine_window -= set(op.full)
        self.transit = (op, peers)

    def _count_alloc(self, call: Call) -> None:
        model, P = self.model, self.P
        need = call.args[0] if call.method == "alloc" else P * (
            sum((s - 1) % P == 0 for s in call.args[0]) if call.method == "alloc_decode"
            else _extend_pages(call.args[0], call.args[1], P))
        swa_need = need if call.method != "alloc_extend_swa_tail" else \
            -(-call.args[3] // P) * P
        full_ok = need <= model.full.available_size()
        swa_ok = swa_need <= model.swa.available_size()
        self.count(f"{call.method} " + ("ok" if full_ok and swa_ok else "None"))
        if full_ok != swa_ok:
            self.count(f"short on the {'SWA' if full_ok else 'full'} pool only")

    # --- after the op ------------------------------------------------------------------------
    def state(self, op) -> list[tuple[str, str]]:
        # What an engine's op leaves half done is allowed after that op only: peers a clear
        # left unpaired (re-paired by the next call's `set_mapping`, else lost), a released
        # full slot's peer (released by the next call, else a free slot's peer).
        self.allowed = {name: slots for name, (at, slots) in
                        (("transit", self.transit), ("freed", self.freed_mapped)) if at is op}
        return self._state(self.read("state"))

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
        rows, evicted = self.rows, self.evicted
        if self.engine_window:  # the engine's slots with a peer: its window, from position 0
            rows = {**rows, ENGINE: sorted(self.engine_window)}
            evicted = {**evicted, ENGINE: 0}
        full_holders: dict[int, set[int]] = {page: {ENGINE} for page in self.engine_pages}
        for rid, row in self.rows.items():
            for slot in row:
                full_holders.setdefault(slot // P, set()).add(rid)
        swa_pending = model.swa_page_ids_group + sorted({s // P for s in model.swa_free_group
                                                         if s > 0})
        found += [f"full pool: {text}" for text in state_violations(
            model.full.num_pages, state["full free"], state["full staged"],
            model.full.pending_pages(), full_holders)]
        swa_held = swa_holders(state["mapping"], rows, evicted, P)
        for slot in self.allowed.get("transit", ()):
            swa_held.setdefault(slot // P, set()).add(ENGINE)
        found += [f"SWA pool: {text}" for text in state_violations(
            model.swa.num_pages, state["swa free"], state["swa staged"], swa_pending, swa_held)]
        mapping = {slot: peer for slot, peer in state["mapping"].items()
                   if slot not in self.allowed.get("freed", ())}
        return found + mapping_violations(state["mapping"], rows, evicted, P) + \
            freed_peer_violations(mapping, state["full free"], state["full staged"], P)


def _extend_pages(prefix, seq, P: int) -> int:
    return sum((s + P - 1) // P - (q + P - 1) // P for q, s in zip(prefix, seq))


def _mapping_diff(expected: dict, actual: dict) -> str:
    keys = sorted(set(expected) | set(actual))
    wrong = [k for k in keys if expected.get(k, 0) != actual.get(k, 0)]
    shown = ", ".join(f"{k}: {expected.get(k, 0)} vs {actual.get(k, 0)}" for k in wrong[:5])
    return f"{len(wrong)} full slots map differently (full slot: expected vs actual SWA slot, " \
           f"0 = none): {shown}"
