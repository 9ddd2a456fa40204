"""The order among one op's frees at either end of HiSparse's free queues (`hisparse_queue.py`
says which blocks end at the head and which at the tail; this says in which order), from the
pool calls the op made in vLLM 0.33.0's order, each with its blocks in the order it passes them.

`BlockPool.free_blocks(blocks)` prepends the blocks it leaves uncached as one batch in the
order given (`prepend_n`) and appends the cached ones likewise (`append_n`); `unpin_blocks`
appends. A block reaches no reference at the last of the op's calls that drops one of its
references; so the head, front first, holds the later calls' batches before the earlier ones'
(each in its given order), and the tail the earlier calls' before the later ones'. The calls
of an op, read in the release:

- an allocation's `advance_scheduled` -> `update_residency`: the clean pages unpinned, last
  page first (`_unpin_clean_pages`), on the request's row as the worker reads it after the op;
- a finish or preemption (`KVCacheManager.free` -> each manager in group order): the source
  manager's `pop_blocks_for_free` first calls `HiSparseCoordinator.free` (the row's clean
  pages unpinned, last page first), then its own host table freed last block first; then the
  indexer's table, the resident row (what `free` did not unpin or drop), the hot region and
  the Mamba group's table, each last block first (`SingleTypeKVCacheManager.free`);
- the worker's report (`HiSparseConnectorScheduler.update_connector_output`): the host copies
  run (`release_completed_host_copies`: the destinations in the report's order, each pair
  (source, destination), the whole reversed), then `update_spills`: each completed transfer's
  resident blocks freed alone, in plan order (`_apply_enqueued_spills`), then for each, in
  plan order, its page unpinned if clean (`_page_became_clean`), a finished request's held
  pages freed last first once its last write-back is in (`_publish_detached_blocks`), and its
  host block (`_complete_host_writes`).

- at the step's end, before the report, the Mamba group's own copy-on-write copies released
  ("hisparse cow": `_free_cow_retained_blocks`, each copy's source and copy; the copy is the
  table's, so only a source may go back: the block a running request's Mamba table held
  where it holds another after the op, or an admission's Mamba hit block); and a running
  request's partial tail's copy (`allocate_new_blocks` with the request's blocks allocated:
  the table keeps the source, `move_block_hashes` keys the copy, whose one reference is the
  retention, so it goes back cached: the extra block `hisparse_queue.py` pops, `queue_copy`),
  after the sources (the Mamba group's pair, the last manager's).

An op with a block at an end that no listed call could have put there, or on the host a
finished request's held pages whose hold is not certain (`hisparse_lag.py`: only where the
publication is not modelled, none on the runs here; an import's hold is decided since
2026-12-08) and whose last write-back completed, is counted, not judged (`UNORDERED`).
A failed import with nothing valid freed by the scheduler: a finish's calls
(`import_freeing`).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import handles, short
from kvfuzz.fuzz.kvmanager.hisparse_checks import HOT, INDEXER, RESIDENT, SOURCE
from kvfuzz.fuzz.kvmanager.hisparse_queue import UNORDERED
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.strategies.kvmanager.trace import Finish, Preempt

ORDERED = "an op's frees at one end of a queue, their order predicted"
EVENTS = (ORDERED,)
FREE, UNPIN = "free_blocks", "unpin_blocks"
DEVICE_COPIES = "device copy-on-write copies taken"  # (`hisparse_cow.DEVICE_COPIES`)


def trimmed(table) -> list[int]:
    """A table without its leading nulls (`trim_null_head`), nulls elsewhere skipped."""
    start = next((i for i, block in enumerate(table) if block), len(table))
    return [block for block in table[start:] if block]


def expected_frees(calls, freed, cached):
    """The head's and the tail's expected order of the blocks `freed` (those at the queue's
    ends after the op), or None where one is in no call. `calls`: (blocks in the order passed,
    `FREE` or `UNPIN`); `cached(block)`: whether a freed block goes to the tail."""
    last: dict = {}  # block -> (call, position, its end) of the last call dropping a reference
    for index, (blocks, kind) in enumerate(calls):
        for position, block in enumerate(blocks):
            last[block] = (index, position, kind == UNPIN or cached(block))
    if any(b not in last for b in freed):
        return None
    head = sorted((b for b in freed if not last[b][2]), key=lambda b: (-last[b][0], last[b][1]))
    return head, sorted((b for b in freed if last[b][2]), key=lambda b: last[b][:2])


class FreeOrder:
    """Mixed into `HiSparseLockstep` first: it records the op's free calls on each pool as
    they happen, and `PoolQueues._queue_after` asks `free_order_problems` once an op's frees
    are at their ends."""

    def start_order(self) -> None:
        self.order_calls: dict = {"host": [], "device": []}
        self.order_copies = 0  # the device copies counted at the last read
        self.order_stepped: list = []  # the requests this op allocated for
        self.order_mark = 0  # the device calls before the step's end (`_free_cow_retained`)
        self.order_unsure = False  # a finished request's host hold this op may not have had

    def stepped(self, rid, tables, actual, pages):
        problems = super().stepped(rid, tables, actual, pages)
        self.order_stepped.append(rid)
        row = self.rows.get(rid, [])
        self.order_calls["device"].append((list(reversed([b for b in row if b])), UNPIN))
        return problems

    @handles(Preempt, Finish)
    def free(self, op):
        request = self.requests.get(op.rid) if self.hs else None
        if request is not None and (isinstance(op, Finish) or request.status == RUNNING):
            self._freeing(op.rid)
        return (yield from super().free(op))

    def import_freeing(self, rid: int) -> None:
        """A failed import with nothing valid, freed by the scheduler (`hisparse_import.py`):
        the same calls as a finish's (its publication none, nothing in flight)."""
        self._freeing(rid)
        super().import_freeing(rid)

    def _freeing(self, rid: int) -> None:
        """`KVCacheManager.free`'s calls: the coordinator's clean pages unpinned (and the
        pages it unpinned before dropped), then each group's table or row, last block first."""
        tables = self.read("block_ids", rid) or [[]] * self.groups
        row = list(self.read("hisparse_residency", rid))
        state = self.residency.get(rid)
        valid, pending, unpinned = (state.valid, state.pending, state.unpinned) if state \
            else (set(), {}, set())
        clean = [p for p in range(len(row)) if p in valid and p not in pending]
        device, host = self.order_calls["device"], self.order_calls["host"]
        device.append(([row[p] for p in reversed(clean) if row[p] and p not in unpinned],
                       UNPIN))
        host.append((list(reversed(trimmed(tables[SOURCE]))), FREE))
        kept = [b if p not in unpinned and p not in clean else 0 for p, b in enumerate(row)]
        for table in (tables[INDEXER], kept, tables[HOT], *tables[RESIDENT + 2:]):
            device.append((list(reversed(trimmed(table))), FREE))

    def _reports(self):
        copies = dict(getattr(self, "host_copies", {}))
        at = len(self.order_calls["host"])
        self.order_mark = len(self.order_calls["device"])  # (after `mamba_step`'s release)
        written = super()._reports()
        run = sorted(d for d in copies if d not in self.host_copies) if self.cow else []
        if run:  # (before the transfers' calls, which `_finished` recorded)
            pairs = [b for d in run for b in (copies[d].source, d)]
            self.order_calls["host"].insert(at, (list(reversed(pairs)), FREE))
        return written

    def _finished(self, done):
        tids = [tid for tid, _ in done]  # (sorted: `pending_spills` is in plan order)
        device, host = self.order_calls["device"], self.order_calls["host"]
        known = [self.transfers.get(tid) for tid in tids]
        for transfer in known:
            device.append((list(transfer.blocks) if transfer else [], FREE))
        ending = [entry for entry in self.detached.values()
                  if entry.waits and entry.waits <= set(tids)]
        publish = {max(entry.waits): entry for entry in ending if entry.sure}
        # (a hold not certain, an import's: its pages freed now or at the finish, unknown)
        self.order_unsure = self.order_unsure or len(publish) < len(ending)
        for (tid, block), transfer in zip(done, known):
            if transfer and self.residency.get(transfer.rid) is transfer.state:
                device.append((list(transfer.blocks), UNPIN))  # (a live request's clean page)
            if tid in publish:
                host.append((list(reversed(publish[tid].blocks)), FREE))
            host.append(([block], FREE))
        return super()._finished(done)

    def free_order_problems(self, name, actual, head, tail, keys) -> list[tuple[str, str]]:
        """The queue `actual` of pool `name` after the op, its frees at the head (`head`, front
        first) and at the tail (`tail`) as `hisparse_queue.py` found them, against the order
        the op's calls give (which also places a free block between the two where nothing
        of the queue before the op stays between them)."""
        if len(head) + len(tail) < 2:
            return []
        several = len(head) > 1 or len(tail) > 1
        freed, calls = set(head) | set(tail), list(self.order_calls[name])
        if name == "device" and self.events.get(DEVICE_COPIES, 0) > self.order_copies:
            # (a running request's partial tail: its pair (source, copy) is the Mamba group's,
            # the last manager's; the source stays in its table, the copy goes back)
            copy = [self.queue_copy] if self.queue_copy else []
            calls.insert(self.order_mark, (self.order_sources + copy, FREE))
        expected = None if name == "host" and self.order_unsure else \
            expected_frees(calls, freed, lambda b: keys[b] is not None)
        if expected is None:
            if several:
                self.count(UNORDERED)
            return []
        if several:
            self.count(ORDERED)
        due = expected[0] + [b for b in actual if b not in freed] + expected[1]
        if due != list(actual):
            wrong = next(i for i, (a, b) in enumerate(zip(actual, due)) if a != b)
            return [("free queue", f"{name} pool after the op: {short(actual)}, expected "
                                   f"{short(due)} ({actual[wrong]} at position {wrong} where "
                                   f"{due[wrong]} was due; its frees in the order of the op's "
                                   f"calls in the release, each block where the last call "
                                   f"that dropped a reference put it)")]
        return []

    def queue_pool_problems(self, host, device, live) -> list[tuple[str, str]]:
        # The device groups' copy-on-write copies released at the step's end
        # (`_free_cow_retained_blocks`: each copy's source and copy, the managers in order; the
        # copy is the table's, so only a source may go back): an admission's hit blocks (the
        # indexer's, then the Mamba group's) its tables no longer hold (a partial hit's copied
        # block), or a block a running request's Mamba table held where it holds another.
        self.order_sources = []
        for rid in self.order_stepped if self.cow else ():
            was, now = self.queue_tables.get(rid) or [], live.get(rid) or []
            held = self.device_held(now)
            hit = self.queue_hits.get(rid, ((), ()))[1]
            pairs = zip(was[-1], now[-1]) if len(was) == len(now) == self.groups else ()
            self.order_sources += [b for b in hit if b and b not in held] + \
                [a for a, b in pairs if a and b and a != b]
        try:
            return super().queue_pool_problems(host, device, live)
        finally:  # (the op's calls are spent, judged or not)
            self.order_read()

    @staticmethod
    def device_held(tables) -> set:
        """The device blocks a request's tables hold: its groups but the source group, whose
        ids are the host pool's (taken as device blocks, an admission's released hit block
        whose id its host table also held was named by no call, until 2026-12-07)."""
        return {b for table in tables[SOURCE + 1:] for b in table}

    def order_read(self) -> None:
        self.order_calls = {"host": [], "device": []}
        self.order_stepped, self.order_mark, self.order_unsure = [], 0, False
        self.order_copies = self.events.get(DEVICE_COPIES, 0)
