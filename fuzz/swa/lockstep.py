"""The hybrid full + sliding-window allocator judge on the shared lock step
(`kvfuzz.fuzz.engine.lockstep`): the oracle (`oracle.swa`) and an implementation driven as a
scheduler drives them (each request's row of full slots, the window cursor below which its SWA slots
are released), compared after every op: the slots returned, None vs success, the three available
sizes, both pools' free lists (exact order) and staged pages, the full-to-SWA mapping, and the
invariants (each pool's pages partitioned into free, staged, pending and held; the mapping pairing
exactly the in-window tokens)."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.engine.lockstep import POISON, Call, Lockstep, handles, short
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.fuzz.swa import scheduler_calls
from kvfuzz.fuzz.swa.scheduler_calls import SchedulerCalls
from kvfuzz.fuzz.swa.slot_calls import SlotCalls
from kvfuzz.fuzz.swa.state import StateChecks
from kvfuzz.oracle.swa.contract import CURRENT
from kvfuzz.oracle.swa.model import Rejected, SWAModel
from kvfuzz.strategies.swa import trace as swa
from kvfuzz.strategies.swa.trace import (Admit, Clear, Decode, Evict, Extend, ExtendTail, Finish,
                                         GroupBegin, GroupEnd)

ALLOCS = ("alloc", "alloc_extend", "alloc_decode", "alloc_extend_swa_tail")


class SWALockstep(SlotCalls, SchedulerCalls, StateChecks, Lockstep):
    KINDS = swa.KINDS
    EVENTS = (*(f"{m} {how}" for m in ALLOCS for how in ("ok", "None")),
              "short on the full pool only", "short on the SWA pool only", "decode skipped",
              "free_swa", "free_swa in a group", "free_swa_segment", "free_swa_segment in a group",
              "finish", "finish in a group", "finish segment", "finish segment in a group",
              "group begin", "nested group begin", "group end", "stray group end", "clear",
              "clear in a group", *scheduler_calls.EVENTS)
    REJECTIONS = (Rejected,)
    OWNERSHIP = (f"slot {POISON} is what the caller wrote over every tensor it passed in, after "
                 f"the call: the allocator kept a caller's tensor, not a copy")

    def build_model(self, trace):
        self.P = trace.page_size
        self.rows: dict[int, list[int]] = {}    # live requests' full slots, by position
        self.evicted: dict[int, int] = {}       # positions below this have no SWA slot
        self.seen: set[int] = set()             # rids ever used: never admitted twice
        self.cached: dict[int, None] = {}       # finished into the prefix cache, oldest first
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
        # The calls of the class's day (oracle/swa/contract.py), and the release calls it has
        # none of (target.absent_calls): a caller bug through one of those is not made.
        self.contract = self.options.get("contract", CURRENT)
        self.absent = self.options.get("absent", frozenset())
        return SWAModel(trace.size, trace.size_swa, trace.page_size, trace.need_sort,
                        trace.debug, trace.strict, self.contract)

    def build_impl(self, trace, cls, device, contract=None, absent=None):
        from kvfuzz.impl.swa.driver import SWADriver  # imports torch

        return make(SWADriver, cls, trace.size, trace.size_swa, trace.page_size, trace.need_sort,
                    device, trace.debug, trace.strict)

    def live(self, rid: int) -> bool:
        """A request the scheduler still runs (not one the prefix cache holds)."""
        return rid in self.rows and rid not in self.cached

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
        grows = tuple((r, n) for r, n in dict(zip(op.rids, op.lens)).items() if self.live(r))
        if grows:
            yield from self._grow(grows, "extend")

    @handles(Decode)
    def decode(self, op: Decode):
        rids = [r for r in dict.fromkeys(op.rids or sorted(self.rows))
                if self.live(r) and self.rows[r]]
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
        if self.P == 1 or not self.live(op.rid) or self.rows[op.rid]:
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
        if not self.live(op.rid):
            return
        row = self.rows[op.rid]
        # The window keeps the last token at least (SGLang's sliding window is never empty): its
        # page's SWA peer is what the next extend's last_loc translates to.
        start = self.evicted[op.rid]
        end = max(0, len(row) - max(op.keep, 1)) // self.P * self.P
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
        if not self.live(op.rid):
            return
        row = self.rows[op.rid]
        start = self.evicted[op.rid]
        dead, live = row[:start], row[start:]
        if not row:  # nothing to release: the scheduler only forgets it
            del self.rows[op.rid], self.evicted[op.rid]
            yield Call(f"finish r{op.rid} (no tokens)")
            return
        if self.contract.row_free:  # before free_full: one free of the whole row
            self.count("finish" + (" in a group" if self.model.group_open else ""))
            yield Call(f"finish r{op.rid}: free({short(row, 60)}) (the whole row; its first "
                       f"{start} tokens have no SWA peer)", "free", (row,))
            del self.rows[op.rid], self.evicted[op.rid]
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
        self._forget_all()

    def _forget_all(self) -> None:
        """Every request and cached one gone, and what the engine held: after a clear or a
        resize."""
        self.rows, self.evicted, self.cached = {}, {}, {}
        self.engine_pages, self.engine_window = set(), set()

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

    # --- after the op: StateChecks (state.py) -----------------------------------------------


def _extend_pages(prefix, seq, P: int) -> int:
    return sum((s + P - 1) // P - (q + P - 1) // P for q, s in zip(prefix, seq))
