"""The HiSparse reduced mode's worker (`hisparse.py`): which write-backs it reports after each op,
and what the host pool holds for them. Without `Trace.hisparse_lag` every transfer a step
planned is reported enqueued and completed, once, at the end of the next op (the "hisparse"
profiles); with it (the "hisparse lag" profile) each transfer's enqueue and each rank's
completion come at the ops `strategies/kvmanager/hisparse_lag.report_delays` draws from the
trace's seed: late, out of order, in parts.

What the scheduler relies on, whatever the lag (vLLM 0.33.0's `HiSparseCoordinator`): a planned
write-back pins its host block (`_plan_page_transfer` touches it, `_complete_host_writes`
frees it once every rank that enqueued it completed it); a request finished with write-backs
in flight has its pages held (`free` touches its first `publication.num_pages` host blocks)
until the last of them completes, when the durable prefix of those pages is published and the
hold freed (`_publish_detached_blocks`). So after every op a host block's reference count is
exactly the live source tables that hold it, plus the write-backs in flight to it, plus the
finished requests holding it (`expected_refs`), and the pages of a finished request are
published when its last write-back completes (`detached_problems`). Whether a finish holds:
`HiSparseCoordinator.free` holds the publication's first `num_pages` host blocks when the
request has a publication pending (its pages not all ready) and pages in flight, which the
host publication model decides (`hisparse_hostcache.py`, `finish_holds`, since 2026-12-08:
before it an import's request, with a restore in flight, a failed load's pages never ready
or a kept hit block to rewrite, was held "not certain", its count within a span and its
publication and frees not judged)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from kvfuzz.fuzz.engine.lockstep import handles, short
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.strategies.kvmanager.hisparse_lag import report_delays
from kvfuzz.strategies.kvmanager.trace import Finish, Preempt

WRITTEN = "write-backs reported done"
ENQUEUED_ONLY = "write-back enqueued, not yet completed"
IN_PARTS = "write-back completed by some ranks, not all"
OUT_OF_ORDER = "write-back completed before one planned earlier"
DETACHED = "finished request's pages held for its write-backs"
DETACHED_PUBLISHED = "finished request's pages published once written back"
EVENTS = (ENQUEUED_ONLY, IN_PARTS, OUT_OF_ORDER, DETACHED, DETACHED_PUBLISHED)


@dataclass
class Flight:
    """A transfer in flight: its host block, the op whose report enqueues it, and how many ranks
    complete it at the end of each op."""
    block: int
    enqueue_at: int
    completions: Counter
    ranks: int


@dataclass
class Detached:
    """A request finished with write-backs in flight: the host blocks its publication holds,
    its pages to publish, the transfers it waits for, and whether the hold is certain."""
    blocks: tuple[int, ...]
    pages: int
    waits: set[int]
    sure: bool


class LaggedReports:
    """The worker's side of `HiSparseLockstep`: `_reports` after each op, the holds in
    `expected_refs`, and a finish's held pages (`free`, before the shared free)."""

    def start_reports(self) -> None:
        self.op_number = 0
        self.flights: dict[int, Flight] = {}
        self.orphans: set[int] = set()  # transfers of a preempted request's state (no hold)
        self.detached: dict[int, Detached] = {}
        self.last_source: dict[int, list[int]] = {}  # rid -> its source table at the last read
        self.cache_pages: dict[int, int] = {}  # rid -> pages its last allocation cached
        # rid -> the host blocks its finish holds, or None where it holds none, as the
        # coordinator's publication decides (`hisparse_hostcache.py`, before the free); a
        # finish missing here is judged by the older rule (`free`)
        self.finish_holds: dict[int, tuple | None] = {}

    def _reports(self) -> set[tuple[int, int]]:
        """The worker's report after this op; the write-backs it completed, (owner, block)."""
        self.op_number += 1
        # (without a lag, `report_delays` has each transfer enqueued and completed by one rank
        # at the end of the op after the one that planned it)
        now = self.op_number
        for tid, block in self.planned:
            enqueue, completions = report_delays(self.trace.hisparse_lag, tid)
            self.flights[tid] = Flight(block, now + 1 + enqueue,
                                       Counter(now + 1 + c for c in completions),
                                       len(completions))
        self.planned = []
        enqueued = [[tid, f.ranks] for tid, f in sorted(self.flights.items())
                    if f.enqueue_at == now]
        completed = [[tid, f.completions[now]] for tid, f in sorted(self.flights.items())
                     if f.completions[now]]
        if enqueued or completed:
            self.read("hisparse_report", enqueued, completed)
        done = [(tid, f.block) for tid, f in sorted(self.flights.items())
                if max(f.completions) <= now]
        for tid, _ in done:
            del self.flights[tid]
        self._count_lag(now, done)
        self.in_flight = [(tid, f.block) for tid, f in sorted(self.flights.items())]
        return self._finished(done)

    def _count_lag(self, now: int, done) -> None:
        if done:
            self.count(WRITTEN)
        if any(f.enqueue_at <= now for f in self.flights.values()):
            self.count(ENQUEUED_ONLY)
        if any(0 < sum(n for at, n in f.completions.items() if at <= now) < f.ranks
               for f in self.flights.values()):
            self.count(IN_PARTS)
        if done and self.flights and max(tid for tid, _ in done) > min(self.flights):
            self.count(OUT_OF_ORDER)

    def _finished(self, done) -> set[tuple[int, int]]:
        """The completed write-backs, (owner, block), less the restores (an import's page
        copied to the device writes no host page); the finished requests' waits updated."""
        written = set()
        for tid, block in done:
            owner = self.owners.pop(tid, None)
            if tid not in self.restores:
                written.add((owner, block))
            self.orphans.discard(tid)
            for held in self.detached.values():
                if tid in held.waits:
                    held.waits.discard(tid)
        return written

    # -- a finish or preemption ---------------------------------------------------------------
    @handles(Preempt, Finish)
    def free(self, op):
        if self.hs and op.rid in self.requests:
            self.freed_with_copies(op.rid)
            mine = {tid for tid, rid in self.owners.items() if rid == op.rid and
                    tid not in self.orphans and tid in dict(self.in_flight)}
            if isinstance(op, Preempt):  # its state goes: its write-backs publish nothing
                if self.requests[op.rid].status == RUNNING:  # (else no free: the op is skipped)
                    self.orphans |= mine
            elif mine and op.rid in self.finish_holds:
                # `HiSparseCoordinator.free` holds the publication's pages exactly when the
                # request has one pending (its pages not all ready) and pages in flight: an
                # import's restore, a failed import's unready pages and a kept hit block's
                # rewrite decide the former, which the publication model follows
                blocks = self.finish_holds.pop(op.rid)
                if blocks is not None:
                    self.detached[op.rid] = Detached(blocks, len(blocks), mine, True)
                    self.count(DETACHED)
            elif mine:  # (the publication not modelled: the rule before it, bounded)
                pages = self.cache_pages.get(op.rid, 0)
                blocks = tuple(self.last_source.get(op.rid, [])[:pages])
                sure = not (mine & self.restores) and op.rid not in self.unready and \
                    op.rid not in self.rewrite
                self.detached[op.rid] = Detached(blocks, pages, mine, sure)
                self.count(DETACHED)
            # (a preemption's, or a finish holding nothing in flight: its decision unused)
            self.finish_holds.pop(op.rid, None)
        return (yield from super().free(op))

    # -- after the op -------------------------------------------------------------------------
    def expected_refs(self, held: list[int]) -> tuple[list[int], list[int]]:
        """Each host block's (least, most) reference count: the tables' holds, the write-backs'
        pins, the finished requests' holds (an uncertain one's within the two)."""
        pins = Counter(block for _, block in self.in_flight)
        sure, unsure = Counter(), Counter()
        for entry in self.detached.values():
            if entry.waits:  # (the last one done: the hold went with it)
                (sure if entry.sure else unsure).update(entry.blocks)
        least = [held[b] + pins[b] + sure[b] for b in range(len(held))]
        return least, [least[b] + unsure[b] for b in range(len(held))]

    def host_count_problems(self, held: list[int], ref: list[int]) -> list[tuple[str, str]]:
        """Each host block's reference count against `expected_refs` (`held`: the live source
        tables holding it)."""
        least, most = self.expected_refs(held)
        wrong = [b for b in range(1, len(held)) if b < len(ref) and
                 not least[b] <= ref[b] <= most[b]]
        if not wrong:
            return []
        spans = {b: f"{least[b]}" + (f" to {most[b]}" if most[b] > least[b] else "")
                 for b in wrong[:4]}
        return [("host pool", "reference counts against the live source tables, the "
                              "write-backs in flight and the finished requests' holds: " +
                 ", ".join(f"block {b} has {ref[b]}, expected {span} ({held[b]} tables)"
                           for b, span in spans.items()) +
                 f"; in flight (transfer, block): {short(sorted(self.in_flight))}")]

    def detached_problems(self, keys, durable) -> list[tuple[str, str]]:
        """A finished request whose last write-back completed: its held pages up to the first
        not durable are published (then the hold goes, `expected_refs`)."""
        problems = []
        for rid, entry in list(self.detached.items()):
            if entry.waits:
                continue
            del self.detached[rid]
            if not entry.sure:
                continue
            lead = next((i for i, b in enumerate(entry.blocks) if b not in durable),
                        len(entry.blocks))
            # (as a live request's, `hisparse.py`: a failed import's pages past its hit never
            # become ready, nor a kept hit block's page until it is written back again; the
            # exact entries: `hisparse_hostcache.py`)
            lead = min(lead, self.unready.get(rid, lead), self.rewrite.get(rid, (lead,))[0])
            unpublished = [i for i in range(lead) if not 0 < entry.blocks[i] < len(keys) or
                           keys[entry.blocks[i]] is None]
            if unpublished:
                problems.append(("published late", (
                    f"r{rid} finished with write-backs in flight; once they completed, its "
                    f"pages {unpublished[:6]} (blocks {short(entry.blocks[:lead])} written "
                    f"back) are not cached")))
            else:
                self.count(DETACHED_PUBLISHED)
        return problems
