"""The HiSparse reduced mode's device pool (`hisparse.py`): each device block's reference count,
exactly, from what the tables hold, the write-backs in flight and the resident pages the
coordinator unpinned. From vLLM 0.33.0's `HiSparseCoordinator` (`vllm/v1/hisparse/
coordinator.py`) and its resident and hot managers (`single_type_kv_cache_manager.py`):

- the indexer's and the hot region's tables hold a reference on each of their blocks (a hit's
  blocks are touched, new ones handed out with one);
- a resident page holds one from when it is allocated (`HiSparseResidentManager.
  allocate_new_blocks`, an import's last page) or adopted (a GPU copy of a host hit's page,
  `_adopt_copies` touches it) until the coordinator unpins it (`_unpin_page`: the count drops,
  the page stays in the append-only table and is read until the pool hands the block out
  again, `unpin_blocks`) or the request is freed (`free`: every page still pinned lets go);
- a write-back (or an import's restore) pins the page's resident block when planned
  (`_plan_page_transfer` touches it) until every rank that enqueued it completed it
  (`_apply_enqueued_spills` frees it), whether or not its request is still there;
- a page is unpinned when it is clean (its write-back completed, or a host hit's or a done
  import's page, `valid_pages`), no transfer of it in flight, still resident, not one of the
  last `ACTIVE_TAIL_PAGES` (2) of the table, and its request can read from the host (its hot
  region whole): at its write-back's completion (`_page_became_clean`), or at the request's
  next step (`advance_scheduled` -> `update_residency` -> `_unpin_clean_pages`, every clean
  page still pinned, last first); an adopted page is clean.

A host hit's adoptions themselves, which copies exist and which pages take them, are
`hisparse_copies.py`'s (mixed in here).

So after every op a device block's count is: the live indexer and hot tables that hold it,
plus the live requests' resident pages on it that are not unpinned, plus the write-backs in
flight pinning it (`device_count_problems`, "device pool"). What the judge reads for it: each
request's resident row as the worker reads it (`hisparse_residency`: an unpinned page's block
until the pool reuses it, then 0) and each planned transfer's resident blocks (the offload
command's `resident_block_ids`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kvfuzz.fuzz.engine.lockstep import handles, short
from kvfuzz.fuzz.kvmanager.hisparse_checks import HOT, HOT_BLOCKS, INDEXER, RESIDENT, SOURCE
from kvfuzz.fuzz.kvmanager.hisparse_copies import TWO_COPIES, GpuCopies
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.strategies.kvmanager.trace import Finish, Preempt

ACTIVE_TAIL_PAGES = 2  # vllm/v1/hisparse/types.py: the table's last pages stay pinned
UNPINNED = "clean resident page unpinned"
ADOPTED = "GPU copy of a host hit's page adopted"
PIN_EVENTS = (UNPINNED, ADOPTED, TWO_COPIES)


@dataclass
class Residency:
    """One request's residency as the coordinator keeps it (`_HiSparseRequestState`), from its
    admission to its free: the clean pages, the transfers in flight by page, the clean pages
    still pinned, the pages unpinned; the pages whose GPU copies were considered
    (`copies_recorded_blocks`) and the host hit's pages its next step adopts (`pages_to_adopt`)."""
    valid: set = field(default_factory=set)
    pending: dict = field(default_factory=dict)
    pinned_clean: set = field(default_factory=set)
    unpinned: set = field(default_factory=set)
    recorded: int = 0
    to_adopt: int = 0


@dataclass
class Transfer:
    rid: int
    page: int
    state: Residency
    blocks: tuple
    restore: bool


class ResidentPins(GpuCopies):
    """Mixed into `HiSparseLockstep` before `hisparse_lag.LaggedReports`: the judge's model of
    the coordinator's pins; `_pools` calls `device_count_problems` after every op."""

    def start_pins(self) -> None:
        self.residency: dict[int, Residency] = {}
        self.transfers: dict[int, Transfer] = {}
        self.rows: dict[int, list[int]] = {}  # rid -> its resident row at the last read
        self.pins_done: list[int] = []  # transfers the last report completed
        self.pub_pages: dict[int, int] = {}  # rid -> the pages its last cache_blocks publishes
        self.cached: list = []  # (rid, its row, pages) a cache_blocks of this op recorded
        self.start_copies()

    # -- what the judge learns --------------------------------------------------------------
    def admitted(self, rid: int, hit: int) -> None:
        """A new admission: the coordinator's state of it starts over, a host hit's pages
        clean (`commit_computed_blocks`)."""
        pages = hit // self.trace.block_size
        self.residency[rid] = Residency(valid=set(range(pages)), recorded=pages, to_adopt=pages)

    def import_done(self, rid: int, end: int) -> None:
        """An import reported done: its first floor(end / b) pages clean, and only those
        (`complete_host_import`)."""
        self._state(rid).valid = set(range(end // self.trace.block_size))

    def received(self, rid: int, planned, restore: bool = False) -> list[tuple[int, int]]:
        """The transfers a step (or an import's report) planned for `rid`, (transfer id, host
        block, resident blocks): recorded by page; the (transfer id, host block) pairs back."""
        state, source = self._state(rid), self.read("block_ids", rid)[0]
        pairs = []
        for tid, host, blocks in planned or ():
            page = source.index(host) if host in source else -1
            self.transfers[tid] = Transfer(rid, page, state, tuple(blocks), restore)
            state.pending[page] = tid
            pairs.append((tid, host))
        return pairs

    def stepped(self, rid: int, tables, actual, pages: int) -> list[tuple[str, str]]:
        """After `allocate_slots` gave `actual` (its blocks handed out: their copies go), its
        `cache_blocks` published `pages` and `advance_scheduled` ran for `rid`: a host hit's
        pages adopted as the copies say, each adopted page (null in the table, resident in the
        row) pinned and clean; then, if it can read from the host, its clean pages unpinned,
        last first (`update_residency`)."""
        self.handed_out(actual)
        state, row = self._state(rid), self._row(rid)
        self.published_by(rid, pages, row)
        problems = self.adoption_problems(rid, state, tables[SOURCE], row, self.host_keys) \
            if state.to_adopt else []
        raw = tables[RESIDENT]
        for page, block in enumerate(row):
            if block and page < len(raw) and not raw[page] and page not in state.unpinned \
                    and page not in state.pinned_clean:
                state.pinned_clean.add(page)
                self.count(ADOPTED)
        if len(tables[HOT]) == HOT_BLOCKS:
            for page in sorted(state.pinned_clean, reverse=True):
                self._unpin(state, row, page)
        return problems

    def published_by(self, rid: int, pages: int, row=None) -> None:
        """A `cache_blocks` of `rid` publishing its first `pages` pages: the pages whose GPU
        copies it records, resolved at the op's end (their hashes are read then)."""
        self.pub_pages[rid] = pages
        chosen = self.window(self._state(rid), pages)
        if chosen:
            self.cached.append((rid, list(row if row is not None else self._row(rid)), chosen))

    def _finished(self, done):
        self.pins_done += [tid for tid, _ in done]
        return super()._finished(done)

    @handles(Preempt, Finish)
    def free(self, op):
        request = self.requests.get(op.rid) if self.hs else None
        if request is not None and (isinstance(op, Finish) or request.status == RUNNING):
            self.freed(op.rid)
        return (yield from super().free(op))

    def freed(self, rid: int) -> None:
        """`free`: every page still pinned lets go; its state goes (its transfers' pins stay)."""
        self.residency.pop(rid, None)
        self.rows.pop(rid, None)
        self.pub_pages.pop(rid, None)

    # -- the model ---------------------------------------------------------------------------
    def _state(self, rid: int) -> Residency:
        return self.residency.setdefault(rid, Residency())

    def _row(self, rid: int) -> list[int]:
        row = list(self.read("hisparse_residency", rid))
        self.rows[rid] = row
        return row

    def _unpin(self, state: Residency, row: list[int], page: int) -> None:
        """`_unpin_page`: a clean page with nothing in flight, resident, outside the tail."""
        if page in state.pending or page not in state.valid or \
                page >= len(row) - ACTIVE_TAIL_PAGES or not row[page]:
            return
        state.pinned_clean.discard(page)
        state.unpinned.add(page)
        self.count(UNPINNED)

    def _complete(self, tables: dict, keys) -> None:
        """The last report's completions (`_complete_host_writes`, in plan order): a live
        request's page clean (a write-back's; a restore's if the import made it valid), and
        unpinned at once if its request can read from the host; a restored clean page's GPU
        copy recorded."""
        for rid, row, pages in self.cached:  # the op's cache_blocks came before its report
            self.record(self.resolve(tables.get(rid, [[]])[SOURCE], row, keys, pages))
        self.cached, completed = [], set()
        for tid in sorted(self.pins_done):
            transfer = self.transfers.get(tid)
            if transfer is None:
                continue
            state = transfer.state
            if self.residency.get(transfer.rid) is not state:
                continue  # freed since: its pages went with it
            state.pending.pop(transfer.page, None)
            completed.add(transfer.rid)
            if not transfer.restore:
                state.valid.add(transfer.page)
            if transfer.page in state.valid:
                state.pinned_clean.add(transfer.page)
                hot = tables.get(transfer.rid, [[]] * 4)[HOT]
                row = self.rows.get(transfer.rid, [])
                if len(hot) == HOT_BLOCKS:
                    self._unpin(state, row, transfer.page)
                if transfer.restore:
                    self.record(self.resolve(tables[transfer.rid][SOURCE], row, keys,
                                             [transfer.page]))
        for tid in self.pins_done:
            self.transfers.pop(tid, None)
        self.pins_done = []
        # the report's publications, one per request with a completion, in a set's order
        self.record(*(self.resolve(tables[rid][SOURCE], self.rows.get(rid, []), keys,
                                   self.window(self.residency[rid], self.pub_pages.get(rid, 0)))
                      for rid in sorted(completed)))

    # -- after the op ------------------------------------------------------------------------
    def device_count_problems(self, tables: dict, ref: list[int], keys) -> list[tuple[str, str]]:
        """Each device block's reference count (`tables`: the live requests' tables, by rid)
        against the tables, the pinned resident pages and the write-backs in flight; first the
        report's completions and the GPU copies the op recorded (`keys`: the host pool's)."""
        for rid, groups in tables.items():
            if rid in self.residency or groups[RESIDENT]:
                self._row(rid)
        if self.reset_done:  # every copy's block was handed back: `reset_prefix_cache` drops all
            self.start_copies()
        self._complete(tables, keys)
        held, pinned = Counter(), Counter()
        for rid, groups in tables.items():
            # (and a Mamba group's states beside the four: "hisparse cow")
            held.update(b for g in (INDEXER, HOT, *range(4, len(groups))) for b in groups[g])
            unpinned = self.residency[rid].unpinned if rid in self.residency else set()
            pinned.update(b for page, b in enumerate(self.rows.get(rid, []))
                          if page not in unpinned)
        flying = Counter(b for tid in dict(self.in_flight) if tid in self.transfers
                         for b in self.transfers[tid].blocks)
        wrong = [b for b in range(1, len(ref))
                 if ref[b] != held[b] + pinned[b] + flying[b]]
        if not wrong:
            return []
        return [("device pool", "reference counts against the live indexer and hot tables, the "
                                "pinned resident pages and the write-backs in flight: " +
                 ", ".join(f"block {b} has {ref[b]}, expected "
                           f"{held[b] + pinned[b] + flying[b]} ({held[b]} tables, {pinned[b]} "
                           f"resident pins, {flying[b]} in flight)" for b in wrong[:4]) +
                 f"; rows {short(self.rows)}, unpinned "
                 f"{short({rid: sorted(s.unpinned) for rid, s in self.residency.items()})}")]
