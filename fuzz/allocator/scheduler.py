"""The scheduler side of the allocator differential: keeps every request's token -> slot row and the
holders of every page, plans the one concrete allocator call a trace op stands for (`Planned`;
last_loc computed as a scheduler does: the slot of the last stored token, -1 for none), and
records what came back.

Ops resolve against the oracle's state (both sides agree until the first divergence), so the same
trace gives the same calls on every implementation. A token-interface trace (upstream
`TokenToKVPoolAllocator`) gets `alloc(n)` for an extend or a decode batch, as SGLang's
scheduler calls it at page size 1, and the slots are split over the batch in order.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfuzz.oracle.allocator.model import AllocatorModel
from kvfuzz.oracle.allocator.invariants import ENGINE, new_slot_violations
from kvfuzz.strategies.inputs import ceil_pages
from kvfuzz.strategies.allocator.trace import (BY_SLOT, Admit, AllocPages, AllocSlots, Clear,
                                               Decode, DecodeSlots, Extend, ExtendSlots, Finish,
                                               FreeSegments, FreeSlots, GroupBegin,
                                               GroupEnd, Op, Trace, Truncate,
                                               describe_slot_op)


@dataclass
class Planned:
    """One allocator call in plain ints. `rids`/`starts`: who receives the output, from which
    position; `release`: (rid, first page index released) committed after a free."""

    method: str | None          # None: the op changes only the scheduler's tables
    args: tuple
    text: str
    rids: tuple = ()
    starts: tuple = ()
    lens: tuple = ()
    release: tuple | None = None
    misuse: str | None = None
    holder: bool = False        # `alloc` for a new holder (AllocPages), not for a batch
    engine: tuple | None = None  # a by-slot op: what each output's page continues (below)


class Scheduler:
    def __init__(self, trace: Trace):
        self.P, self.debug = trace.page_size, trace.debug
        self.token = trace.interface == "token"
        self.rows: dict[int, list[int]] = {}         # live requests
        self.seen: set[int] = set()                  # rids ever used: never admitted twice
        self.holders: dict[int, set[int]] = {}       # page -> live rids holding it
        self.released: list[list[int]] = []          # slots of recent releases (double frees)
        self.group_open = False

    def pages_of(self, rid: int) -> list[int]:
        row = self.rows[rid]
        return [row[j] // self.P for j in range(0, len(row), self.P)]

    def resolve(self, op: Op, model: AllocatorModel) -> Planned | None:
        """The call `op` stands for now, or None when it resolves to nothing (e.g. a dead rid)."""
        P = self.P
        if isinstance(op, Admit):
            if op.rid in self.seen:
                return None
            donor = self.rows.get(op.share_from) if op.share_from is not None else None
            shared = min(op.share_pages, len(donor) // P) if donor else 0
            return Planned(None, (), f"admit r{op.rid} with {shared} shared pages", (op.rid,),
                           release=("admit", op.share_from, shared))
        if isinstance(op, Extend):
            return self._extend(op, model)
        if isinstance(op, Decode):
            rids = [r for r in dict.fromkeys(op.rids or sorted(self.rows)) if self.rows.get(r)]
            if not rids:
                return None
            seq = [len(self.rows[r]) + 1 for r in rids]
            last = [self.rows[r][-1] for r in rids]
            if self.token:
                return Planned("alloc", (len(rids),), f"alloc({len(rids)}) to decode "
                               + " ".join(f"r{r}" for r in rids), tuple(rids),
                               tuple(s - 1 for s in seq), (1,) * len(rids))
            return Planned("alloc_decode", (seq, last),
                           f"alloc_decode(seq_lens={seq}, last_loc={last})",
                           tuple(rids), tuple(s - 1 for s in seq), (1,) * len(rids))
        if isinstance(op, (Finish, Truncate)):
            return self._release(op)
        if isinstance(op, AllocPages):
            if op.rid in self.seen:
                return None
            pages = max(0, op.pages + (len(model.free) + len(model.staged) if op.relative else 0))
            return Planned("alloc", (pages * P,), f"alloc({pages * P}) for r{op.rid}", (op.rid,),
                           (0,), holder=True)
        if isinstance(op, GroupBegin) and not self.group_open:
            return Planned("group_begin", (), "free_group_begin()", release=("group", True))
        if isinstance(op, GroupEnd) and self.group_open:
            return Planned("group_end", (), "free_group_end()", release=("group", False))
        if isinstance(op, Clear):
            return Planned("clear", (), "clear()", release=("clear",))
        if isinstance(op, BY_SLOT):
            return self._by_slot(op)
        return None  # a Misuse op, among others: see `kvfuzz.fuzz.allocator.misuse`

    def _by_slot(self, op) -> Planned | None:
        """A live guard's op: the engine's own call. Its outputs go to "the engine" (one holder
        of every page it was handed); `engine` is, per batch entry, the first position it gets
        and the slot of its last stored token (-1: none), which a continued page must match."""
        text = describe_slot_op(op)
        if isinstance(op, AllocSlots):
            return Planned("alloc", (op.need_size,), text, (ENGINE,), (0,), (op.need_size,),
                           engine=((0, -1),))
        if isinstance(op, (ExtendSlots, DecodeSlots)):
            decode = isinstance(op, DecodeSlots)
            prefix = [s - 1 for s in op.seq_lens] if decode else list(op.prefix_lens)
            if any(q < 0 or s < q for q, s in zip(prefix, op.seq_lens)):
                return None  # outside the contract: no caller makes it
            lens = tuple(s - q for q, s in zip(prefix, op.seq_lens))
            args = (list(op.seq_lens), list(op.last_loc)) if decode else \
                (prefix, list(op.seq_lens), list(op.last_loc), op.num_new_pages)
            return Planned("alloc_decode" if decode else "alloc_extend", args, text,
                           (ENGINE,) * len(lens), tuple(prefix), lens,
                           engine=tuple(zip(prefix, op.last_loc)))
        if isinstance(op, FreeSlots):
            pages = sorted({slot // self.P for slot in op.slots})
            return Planned("free_slots", (list(op.slots),), text, release=("engine", pages))
        if isinstance(op, FreeSegments):
            segments, at = [], 0
            for start, count in zip(op.starts, op.counts):
                segments.append((list(op.slots[at:at + count]), start))
                at += count
            pages = [slot // self.P for slots, _ in segments for slot in slots[::self.P]]
            return Planned("free_segments", (segments,), text, release=("engine", pages))
        return Planned("free_page_ids", (list(op.page_ids),), text,
                       release=("engine", list(op.page_ids)))

    def _extend(self, op: Extend, model: AllocatorModel) -> Planned | None:
        P = self.P
        batch = {}
        for rid, n in zip(op.rids, op.lens):
            if rid in self.rows and rid not in batch:
                batch[rid] = n
        if not batch:
            return None
        rids = list(batch)
        prefix = [len(self.rows[r]) for r in rids]
        seq = [q + batch[r] for q, r in zip(prefix, rids)]
        if op.fill is not None:
            seq[-1] = prefix[-1] + self._fill_length(prefix, seq, op, model)
        lens = tuple(s - q for q, s in zip(prefix, seq))
        if self.token:
            return Planned("alloc", (sum(lens),), f"alloc({sum(lens)}) to extend "
                           + " ".join(f"r{r}+{n}" for r, n in zip(rids, lens)), tuple(rids),
                           tuple(prefix), lens)
        last = [self.rows[r][q - 1] if q else -1 for r, q in zip(rids, prefix)]
        exact = sum(ceil_pages(s, P) - ceil_pages(q, P) for q, s in zip(prefix, seq)) \
            if op.exact else None
        text = (f"alloc_extend(prefix_lens={prefix}, seq_lens={seq}, last_loc={last}"
                + (f", num_new_pages={exact})" if op.exact else ")"))
        return Planned("alloc_extend", (prefix, seq, last, exact), text, tuple(rids), tuple(prefix),
                       lens)

    def _fill_length(self, prefix, seq, op: Extend, model: AllocatorModel) -> int:
        """Tokens for the last request so the batch needs `available pages + fill` new pages."""
        P = self.P
        others = sum(ceil_pages(s, P) - ceil_pages(q, P) for q, s in zip(prefix[:-1], seq[:-1]))
        pages = max(0, len(model.free) + len(model.staged) + op.fill - others)
        to_boundary = ceil_pages(prefix[-1], P) * P - prefix[-1]
        return to_boundary + (pages * P - min(op.trim, P - 1) if pages else 0)

    def _release(self, op) -> Planned | None:
        """Finish or Truncate: free the request's pages that no other live request holds."""
        if op.rid not in self.rows:
            return None
        P, row, pages = self.P, self.rows[op.rid], self.pages_of(op.rid)
        first = len(pages)  # shared pages are a prefix: the exclusive ones a suffix
        while first and self.holders[pages[first - 1]] == {op.rid}:
            first -= 1
        finish = isinstance(op, Finish)
        if not finish:
            first = max(first, op.keep // P)
        label = f"{'finish' if finish else 'truncate'} r{op.rid}"
        release = ("free", op.rid, first, finish)
        if first >= len(pages) and op.how == "segment":  # an empty segment from the row's
            # end, as a cache frees row[protected:end] with nothing past its protected part: a
            # no-op, wherever in a page it starts
            return Planned("free_segment", ([], len(row)),
                           f"{label}: free_segment([], start_pos={len(row)}), nothing of its own",
                           release=release)
        if first >= len(pages):
            return Planned(None, (), f"{label}: nothing of its own to free", release=release)
        slots, start = row[first * P:], first * P
        if op.how == "free":
            return Planned("free_slots", (slots,), f"{label}: free({_few(slots)})", release=release)
        if op.how == "segment":
            return Planned("free_segment", (slots, start),
                           f"{label}: free_segment({_few(slots)}, start_pos={start})",
                           release=release)
        return Planned("free_page_ids", (pages[first:],),
                       f"{label}: free_page_ids({pages[first:]})", release=release)

    def commit(self, call: Planned, result: list[int] | None) -> list[str]:
        """Record a call's effect (`result`: the slots the implementation returned); returns the
        violations found in the new slots."""
        if call.method in ("alloc", "alloc_extend", "alloc_decode"):
            return self._commit_slots(call, result) if result is not None else []
        kind = call.release[0] if call.release else None
        if kind == "admit":
            rid, donor, shared = call.rids[0], call.release[1], call.release[2]
            self.seen.add(rid)
            self.rows[rid] = list(self.rows[donor][:shared * self.P]) if shared else []
            for page in self.pages_of(rid):
                self.holders[page].add(rid)
        elif kind == "free":
            self._commit_free(*call.release[1:])
        elif kind == "group":
            self.group_open = call.release[1]
        elif kind == "clear":
            self.rows, self.holders, self.released, self.group_open = {}, {}, [], False
        elif kind == "engine":  # the engine's pages released: held by no one now
            for page in call.release[1]:
                holders = self.holders.get(page)
                if holders is not None:
                    holders.discard(ENGINE)
                    if not holders:
                        del self.holders[page]
        return []

    def _commit_slots(self, call: Planned, result: list[int]) -> list[str]:
        if call.engine is not None:
            return self._commit_engine_slots(call, result)
        problems, at = [], 0
        if call.holder:
            self.seen.add(call.rids[0])
            self.rows[call.rids[0]] = []
            call.lens = (len(result),)
        for rid, start, n in zip(call.rids, call.starts, call.lens):
            row, new = self.rows[rid], result[at:at + n]
            at += n
            problems += new_slot_violations(rid, start, new, row, self.P, self.holders)
            row.extend(new)
            for position, slot in enumerate(new, start):
                if position % self.P == 0:
                    self.holders.setdefault(slot // self.P, set()).add(rid)
        return problems

    def _commit_engine_slots(self, call: Planned, result: list[int]) -> list[str]:
        """A by-slot allocation: each entry's slots checked as a request's are, its row known
        only as far as its last stored token's page, every page opened held by the engine."""
        problems, at = [], 0
        lens = call.lens if call.method != "alloc" else (len(result),)
        for (start, last), n in zip(call.engine, lens):
            new = result[at:at + n]
            at += n
            problems += new_slot_violations(ENGINE, start, new, _LastPage(last, self.P), self.P,
                                            self.holders)
            for position, slot in enumerate(new, start):
                if position % self.P == 0:
                    self.holders.setdefault(slot // self.P, set()).add(ENGINE)
        return problems

    def _commit_free(self, rid: int, first: int, finish: bool) -> None:
        pages = self.pages_of(rid)
        for index, page in enumerate(pages):
            if finish or index >= first:
                self.holders[page].discard(rid)
                if not self.holders[page]:
                    del self.holders[page]
        if first < len(pages):
            self.released = (self.released + [self.rows[rid][first * self.P:]])[-4:]
        if finish:
            del self.rows[rid]
        else:
            del self.rows[rid][first * self.P:]


def _few(slots: list[int]) -> str:
    return f"{len(slots)} slots {slots[:6]}{'...' if len(slots) > 6 else ''}"


class _LastPage:
    """A by-slot request's row as far as the slot checks read it: its slots before the first
    new position are in the page of its last stored token."""

    def __init__(self, last_loc: int, page_size: int):
        self.slot = last_loc - last_loc % page_size if last_loc >= 0 else -page_size

    def __getitem__(self, position: int) -> int:
        return self.slot
