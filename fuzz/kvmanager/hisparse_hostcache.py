"""Which host blocks are cached under which keys, in the HiSparse reduced mode (`hisparse.py`),
predicted entry by entry after every op on every HiSparse profile: the host pool's entries read
after the op before, less those of the cached blocks the op's pops evicted (the host free
queue's prediction, `hisparse_queue.py`) or a reset's, plus what each publication adds. The
publications, read in vLLM 0.33.0 (`HiSparseCoordinator`, `HiSparseSourceManager`):

- a request's state starts at its admission: its host hit's cdiv(h, b) pages valid and ready
  (`commit_computed_blocks`), the source group's cached count h // b (`add_local_computed_
  blocks`, the floor for a hit inside a block);
- every allocation's `cache_blocks(tokens)` sets its pending publication to those tokens
  (`publish_when_ready`) and publishes min(tokens, ready pages * b) (`publish_blocks`: full
  attention's `cache_blocks`, the full blocks from the cached count, and, hashed per fewer
  tokens than a block, the prompt's partial tail: `oracle/kvmanager/align_caching.py`'s
  `full_attention`); the publication goes once the ready pages reach its pages;
- a report that completes write-backs of a request's live state makes their pages valid, moves
  its ready prefix over the valid pages and publishes again (`_complete_host_writes`; the
  order of two requests' publications in one report is a set's, and changes nothing here:
  each keys its own blocks);
- a finish with write-backs in flight keeps its publication, its first `pages` host blocks and
  its cached count (`free`); when the last of them completes, the full blocks from that count
  to min(ready, pages) are keyed (`_publish_detached_blocks`, no partial tail); a preemption's
  state goes with its publication (its write-backs publish nothing).

A second connector's import ("hisparse import"): its admission keeps the retained hit blocks
it adopts as the cached count and delays `cache_blocks`; a load reported done makes the first
floor((h + e) / b) pages valid and ready (`complete_host_import`), a failed one none past the
hit, then the scheduler's `cache_blocks` at the valid tokens publishes; a restore's completion
makes no page valid but publishes again (its admission's pops and a failed load's free judged
with the queues since 2026-12-08). Not judged (counted, `SKIPPED`): an op whose queues are not
judged (the first read, or one the queue check found wrong), and one where a publication's
request is unknown (none on the runs here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.fuzz.engine.lockstep import handles
from kvfuzz.fuzz.kvmanager.align_caching import map_difference
from kvfuzz.fuzz.kvmanager.connector import LOADING
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.oracle.kvmanager import align_caching as rule
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.strategies.kvmanager.trace import Finish, Preempt

JUDGED = "host cache map predicted (HiSparse)"
SKIPPED = "host cache map not judged (a publication not modelled)"
EVENTS = (JUDGED, SKIPPED)


@dataclass
class Publication:
    """One request's host publication (its `_HiSparseRequestState`'s part and the source
    group's `num_cached_block`): `tokens` None where none is pending; `held` the host blocks a
    finish kept for it."""
    cached: int
    valid: set
    ready: int
    tokens: int | None = None
    pending: set = field(default_factory=set)
    held: tuple | None = None


class HostCaching:
    """Mixed into `HiSparseLockstep` ahead of `hisparse_queue.PoolQueues`, whose
    `queue_pool_problems` it wraps (the host pool's evicted blocks, `host_evicted`)."""

    def start_host_caching(self) -> None:
        self.pubs: dict[int, Publication] = {}  # rid -> its live state's publication
        self.pub_transfers: dict = {}  # transfer id -> (rid, page, Publication, restore)
        self.host_inserts: list = []  # this op's publications, in order
        self.host_unsure = False  # this op touched a publication not modelled
        self.host_tokens: dict = {}  # a hash unit -> the tokens it covers
        self.host_evicted = None

    # -- what the judge learns --------------------------------------------------------------
    def admitted(self, rid: int, hit: int) -> None:
        super().admitted(rid, hit)
        size = self.trace.block_size
        self.pubs[rid] = Publication(hit // size, set(range(cdiv(hit, size))), cdiv(hit, size))

    def stepped(self, rid, tables, actual, pages):
        """After an allocation's `cache_blocks`: its publication set and published."""
        pub, request = self.pubs.get(rid), self.requests[rid]
        if pub is not None:
            tokens = min(request.computed, len(request.tokens))
            pub.tokens = rule.cacheable(tokens, self.trace.block_size, self.unit, False)
            self._publish(rid, pub, tables[0])
        else:
            self.host_unsure = True
        return super().stepped(rid, tables, actual, pages)

    def received(self, rid: int, planned, restore: bool = False):
        pairs = super().received(rid, planned, restore)
        pub = self.pubs.get(rid)
        for tid, _ in pairs:
            page = self.transfers[tid].page
            self.host_unsure |= pub is None
            self.pub_transfers[tid] = (rid, page, pub, restore)
            if pub is not None:
                pub.pending.add(page)
        return pairs

    def import_done(self, rid: int, end: int) -> None:
        """`complete_host_import`: the first floor(end / b) pages valid and ready, only those
        (nothing pending to publish yet: the admission delayed its `cache_blocks`)."""
        super().import_done(rid, end)
        pub = self.pubs.get(rid)
        if pub is not None:
            pages = end // self.trace.block_size
            pub.valid, pub.ready = set(range(pages)), pages

    def published_by(self, rid: int, pages: int, row=None) -> None:
        """A load's report's `cache_blocks` (the scheduler's `_update_waiting_for_remote_kv`)
        at the valid tokens: the first the import's request makes, from the source group's
        cached count at its admission (its retained hit blocks kept, `request.held`)."""
        super().published_by(rid, pages, row)
        request, pub = self.requests.get(rid), self.pubs.get(rid)
        if row is not None or request is None or pub is None or request.status != LOADING:
            return
        pub.cached = request.held[0]
        pub.tokens = rule.cacheable(request.computed, self.trace.block_size, self.unit, False)
        self._publish(rid, pub, self.read("block_ids", rid)[0])

    def freed(self, rid: int) -> None:
        super().freed(rid)
        pub = self.pubs.pop(rid, None)  # (a failed load with nothing valid: freed, unfinished)
        if pub is not None:
            pub.tokens = None

    def _finished(self, done):
        """The report's completions (`_complete_host_writes`): a live state's pages valid, its
        ready prefix moved and published; a finished request's held pages published once its
        last write-back completes."""
        written = super()._finished(done)
        completed = {}
        for tid, _ in done:
            owner, page, pub, restore = self.pub_transfers.pop(tid, (None, None, None, False))
            if pub is None:
                continue
            pub.pending.discard(page)
            live = owner if self.pubs.get(owner) is pub else None  # (still its live state)
            if live is None and pub.tokens is None:
                continue  # (a preempted request's state: nothing published)
            if not restore:
                pub.valid.add(page)
            if live is not None:
                completed[live] = pub
            elif pub.held is not None and not pub.pending:
                self._publish_held(pub)
        for rid, pub in completed.items():
            while pub.ready in pub.valid:
                pub.ready += 1
            self._publish(rid, pub, self.read("block_ids", rid)[0])
        return written

    @handles(Preempt, Finish)
    def free(self, op):
        request = self.requests.get(op.rid) if self.hs else None
        if request is not None and (isinstance(op, Finish) or request.status == RUNNING):
            pub = self.pubs.pop(op.rid, None)
            if pub is not None and isinstance(op, Finish) and pub.tokens is not None and \
                    pub.pending:
                pages = pub.tokens // self.trace.block_size
                pub.held = (tuple(self.last_source.get(op.rid, [])[:pages]),
                            self.requests[op.rid])
            elif pub is not None:
                pub.tokens = None
            if pub is not None and isinstance(op, Finish):  # (the worker's side: its hold)
                self.finish_holds[op.rid] = pub.held[0] if pub.held is not None else None
        return (yield from super().free(op))

    # -- the model ---------------------------------------------------------------------------
    def _units(self, request) -> list:
        units = request.hashes(self.unit)
        for index, unit in enumerate(units):
            self.host_tokens.setdefault(unit, (index + 1) * self.unit)
        return units

    def _publish(self, rid: int, pub: Publication, source) -> None:
        """`_publish_host_blocks_if_ready`: `publish_blocks(min(tokens, ready * b))`."""
        if pub.tokens is None:
            return
        size, request = self.trace.block_size, self.requests[rid]
        tokens = min(pub.tokens, pub.ready * size)
        units = self._units(request)
        self.host_inserts.append((list(source), pub.cached, tokens, units, request.prompt))
        pub.cached = max(pub.cached, rule.full_blocks_end(tokens, units, size, self.unit))
        if pub.ready >= pub.tokens // size:
            pub.tokens = None

    def _publish_held(self, pub: Publication) -> None:
        """`_publish_detached_blocks`: the held blocks from the cached count to min(ready,
        pages), full blocks only; the publication goes."""
        while pub.ready in pub.valid:
            pub.ready += 1
        blocks, request = pub.held
        end = min(pub.ready, pub.tokens // self.trace.block_size)
        self.host_inserts.append((list(blocks), pub.cached, None, self._units(request), end))
        pub.tokens = None

    def _apply(self, entries, insert) -> None:
        table, cached, tokens, units, last = insert
        size = self.trace.block_size
        if tokens is None:  # a held publication: `cache_full_blocks(cached, last)`
            rule.cache_full_blocks(entries, table, cached, last, units, size, self.unit,
                                   rule.FULL)
        else:
            rule.full_attention(entries, table, cached, tokens, units, last, size, self.unit,
                                False)

    # -- after the op ------------------------------------------------------------------------
    def queue_pool_problems(self, host, device, live):
        self.host_evicted = None
        problems = super().queue_pool_problems(host, device, live)
        mine = self.host_caching_problems(host["keys"])
        return problems or mine

    def host_caching_problems(self, after) -> list[tuple[str, str]]:
        before, inserts = self.host_keys, self.host_inserts
        unsure, evicted = self.host_unsure, self.host_evicted
        self.host_inserts, self.host_unsure, self.host_evicted = [], False, None
        if evicted is None or unsure or len(before) != len(after):
            if before != after:
                self.count(SKIPPED)
            return []
        entries = rule.Entries(before, lambda key: self.host_tokens.get(key[0], 0))
        if self.reset_done:
            entries = rule.Entries([None] * len(after), entries.tokens)
        for block in evicted:
            entries.drop(block)
        for insert in inserts:
            self._apply(entries, insert)
        self.count(JUDGED)
        what = map_difference(entries.as_keys(len(after)), after, before)
        if what is None:
            return []
        return [("host cache map", f"host pool: {what}")]
