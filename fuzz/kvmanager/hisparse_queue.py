"""Which blocks, in the HiSparse reduced mode (`hisparse.py`): after every op, each of the two
pools' free queues (the host pool: the source group; the device pool: the indexer, the resident
pages, the hot region and, in "hisparse cow", the Mamba group) against the queue read after the
op before, with vLLM 0.33.0's `BlockPool` rules (`oracle/kvmanager/align_queue.py`'s
`QueueModel`) and the op's pool calls as far as their order is plain:

- an allocation (`allocate_slots`, an admission or a running request's step) first: an
  admission's hit blocks touched (the source group's first cdiv(hit, b) on the host, the
  indexer's and the Mamba group's on the device: a free one leaves the queue wherever it is),
  then each group's new blocks (`allocate_slots`' answer) taken from the head, the groups in
  the manager's order. What each group took is compared exactly ("which blocks"). The Mamba
  group's copy-on-write copy of a running request's partial tail is in no table and not in the
  answer: where the op took device copies (`DEVICE_COPIES`), the Mamba group's pops are one
  more, its first the copy's;
- then the coordinator's residency work, the worker's reports and a finish's frees, whose
  order across calls the judge does not model (`update_residency`'s unpins and adoptions, a
  write-back's pins released, the host copies' endpoints, a detached publication, the
  request's tables): the queue after the op is the blocks those calls freed that went back
  uncached (`free_blocks` prepends them), then the queue after the allocation less the blocks
  the calls touched out of it, in its order, then the blocks freed cached or unpinned
  (`append_n`; `unpin_blocks` appends whatever its caching). A block whose side is not plain
  (a resident page: unpinned to the tail or freed to the head; a device block whose entries
  the op changed) may be on either. A free block the calls touched and freed again within
  the op may move from the middle to the tail ("re-queued"); one that left the queue must be
  held after the op (adopted, pinned). The order within the freed blocks at either end:
  `hisparse_order.py` (since 2026-12-07), from the op's calls where they name every block
  there; else not predicted (`UNORDERED`).

A second connector's import (`hisparse_import.py`, since 2026-12-08): its admission's pops
as `allocate_slots` makes them for it (`allocate_new_computed_blocks`: every group's hit
touched, the source group's retained hit cut to the import's pages, then each group's
external blocks in order, the source's on the host, the indexer's and the resident group's
last page on the device; then `allocate_new_blocks`' hot region), compared as an
allocation's; its load's report (a restore pins blocks its tables hold: no queue moves; a
failed load with nothing valid frees the request as a finish does) and the resumption (a
step) as any op. Not judged: the first read of a trace. A block free before the op and not
taken keeps its entries (no other block evicted for it) but across an eviction or a reset.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.fuzz.kvmanager.hisparse_checks import INDEXER, RESIDENT, SOURCE
from kvfuzz.oracle.kvmanager.align_queue import QueueModel, skipped_frees
from kvfuzz.oracle.kvmanager.hybrid import cdiv

JUDGED = "free queues predicted (HiSparse's two pools)"
REQUEUED = "free block touched and re-queued within one op"
UNORDERED = "an op's frees at one end of a queue, their order not predicted"
HEAD, TAIL, EITHER = "head", "tail", "either"
EVENTS = (JUDGED, REQUEUED, UNORDERED)


class PoolQueues:
    """Mixed into `HiSparseLockstep` before `hisparse_pins.ResidentPins` and
    `hisparse_admission.Admissions`: it learns an admission's hit and each step's new blocks
    from those, and `_pools` calls `queue_pool_problems` with what it read (which goes on to
    `hisparse_caching.DeviceCaching`'s cache map once both queues agree: beside a Mamba group
    since 2026-12-07, on every HiSparse profile since later that day)."""

    def start_queues(self) -> None:
        self.queue_seen: dict | None = None  # pool name -> (queue, ref, keys) at the last read
        self.queue_tables: dict = {}  # rid -> its tables at the last read
        self.queue_steps: list = []  # (rid, new blocks per group) of this op's allocations
        self.queue_hits: dict = {}  # rid -> (host, device) hit blocks its admission touches
        self.queue_copies = 0  # the device copies counted at the last read
        self.queue_rows: set = set()  # the blocks of the resident rows at the last read
        self.queue_copy = None  # the op's hidden copy (a running request's partial tail)
        # (rid, {pool name: (hit blocks touched, new blocks per group)}) of this op's import
        # admissions (`hisparse_import.py`)
        self.queue_imports: list = []

    def _admission_problems(self, rid, request, new, hit, source, indexer, others_running,
                            made) -> list:
        if self.hs:
            count = cdiv(hit, self.trace.block_size)
            mamba = [b for b in self.mamba_hit if b] if self.cow else []
            self.queue_hits[rid] = (list(source[:count]), list(indexer[:count]) + mamba,
                                    list(indexer[:count]), list(self.mamba_hit) if self.cow
                                    else [])
        return super()._admission_problems(rid, request, new, hit, source, indexer,
                                           others_running, made)

    def import_allocated(self, rid, host_hit, host_new, device_hit, device_new) -> None:
        self.queue_imports.append((rid, {"host": (host_hit, [host_new]),
                                         "device": (device_hit, device_new)}))
        super().import_allocated(rid, host_hit, host_new, device_hit, device_new)

    def stepped(self, rid, tables, actual, pages):
        # (the Mamba group's answer holds nulls for the states it skips)
        self.queue_steps.append((rid, [[b for b in group if b] for group in actual]))
        return super().stepped(rid, tables, actual, pages)

    def queue_pool_problems(self, host, device, live) -> list[tuple[str, str]]:
        """After an op: both pools' queues (`host`, `device`: what `_pools` read; `live`: each
        request's tables)."""
        seen, steps, hits = self.queue_seen, self.queue_steps, self.queue_hits
        copies = self.events.get("device copy-on-write copies taken", 0)
        took_copies, self.queue_copies = copies > self.queue_copies, copies
        before = self.queue_tables
        self.queue_seen = {name: (list(pool["queue"]), list(pool["ref"]), list(pool["keys"]))
                           for name, pool in (("host", host), ("device", device))}
        self.queue_tables = {rid: [list(t) for t in tables] for rid, tables in live.items()}
        self.queue_steps, self.queue_hits = [], {}
        admitted, self.queue_imports = self.queue_imports, []
        rows = {b for row in self.rows.values() for b in row if b}
        self.queue_rows, last_rows = rows, self.queue_rows
        if seen is None:
            return []
        self.count(JUDGED)
        # a resident page's block: in a resident table, or in a row the worker reads (an
        # adopted page's, null in the table), before the op or after it; a live request's
        # (in its row and table, in no other live device table): freed only by an unpin
        tables = [t for t in list(before.values()) + list(live.values()) if len(t) > RESIDENT]
        resident = last_rows | rows | {b for t in tables for b in t[RESIDENT] if b}
        others = {b for t in live.values() for g, table in enumerate(t) if g > RESIDENT or
                  g == INDEXER for b in table}
        pinned = {b for rid, t in live.items() if len(t) > RESIDENT
                  for b in set(t[RESIDENT]) & set(self.rows.get(rid, ())) if b} - others
        groups = {"host": [SOURCE], "device": list(range(INDEXER, self.groups))}
        problems, copy = [], None
        for name, pool in (("host", host), ("device", device)):
            prev_queue, prev_ref, prev_keys = seen[name]
            model = QueueModel(prev_queue, prev_ref, lambda block: prev_keys[block] is not None)
            taken = set()
            for rid, pools in admitted:  # an import's admission: its hit, then its new blocks
                touched, news = pools[name]
                model.touch(list(touched))
                for group, got in zip(groups[name], news):
                    expected = model.pop(len(got))
                    taken.update(expected)
                    if expected != list(got):
                        problems.append(("which blocks", (
                            f"r{rid}'s import: group {group} took {short(got)}, expected "
                            f"{short(expected)} (the {name} pool's free queue's head after "
                            f"its hit's touches and the groups before it)")))
            for rid, new in steps:
                if name == "device" and self.cow:  # the Mamba states it skips: freed first
                    was, got = before.get(rid), live.get(rid)
                    if was and got and len(was) == len(got) == self.groups:
                        model.free(skipped_frees(was[-1], got[-1],
                                                 self.trace.mamba_speculative))
                for block in hits.get(rid, ((), ()))[name == "device"]:
                    model.touch([block])
                for group in groups[name]:
                    hidden = name == "device" and group == self.groups - 1 and self.cow \
                        and took_copies and rid not in hits
                    expected = model.pop(len(new[group]) + hidden)
                    taken.update(expected)
                    copy = expected[0] if hidden and expected else copy
                    if expected[hidden:] != new[group]:
                        problems.append(("which blocks", (
                            f"r{rid}: group {group} took {short(new[group])}, expected "
                            f"{short(expected[hidden:])} (the {name} pool's free queue's "
                            f"head after the op's touches and the groups before it)")))
            if problems:
                return problems[:2]
            self.queue_copy = copy  # (`hisparse_order.py`: its release frees it)
            problems += self._queue_after(name, model, pool, prev_keys, resident, pinned)
            if name == "host" and not problems:  # (`hisparse_hostcache.py`'s evictions)
                self.host_evicted = list(model.evicted)
            if not problems and not (self.evicted or self.reset_done):
                lost = [b for b in prev_queue if b not in taken and
                        pool["keys"][b] != prev_keys[b]][:4]
                if lost:
                    problems.append(("which blocks", f"{name} pool: free blocks {lost} not "
                                     f"taken changed entries: {[prev_keys[b] for b in lost]} "
                                     f"-> {[pool['keys'][b] for b in lost]}"))
        if not problems:  # the device pool's cache map (`hisparse_caching.py`)
            freed = [rid for rid, tables in before.items() if any(tables) and
                     not any(live.get(rid) or ())]
            problems = self.device_caching_problems(seen["device"][2], device["keys"],
                                                    model.evicted, steps, hits, copy, live,
                                                    freed)
        return problems[:2]

    def free_order_problems(self, name, actual, head, tail, keys) -> list[tuple[str, str]]:
        """The order within the frees at each end: not predicted here (`hisparse_order.py`'s
        `FreeOrder`, mixed in before, predicts it where the op's calls give it)."""
        if len(head) > 1 or len(tail) > 1:
            self.count(UNORDERED)
        return []

    def _queue_after(self, name, model, pool, prev_keys, resident, pinned
                     ) -> list[tuple[str, str]]:
        """The queue after the op's unordered calls: freed-uncached, the allocation's queue
        less what left it, freed-cached or unpinned (a block of the middle touched and freed
        again may move to the tail)."""
        actual, keys, ref = pool["queue"], pool["keys"], pool["ref"]
        middle, present = model.queue, set(actual)

        def side(block) -> str:
            cached = (keys[block] is not None, prev_keys[block] is not None)
            if name == "device" and cached[0] != cached[1]:
                return EITHER
            if name == "device" and block in pinned:  # (a live request's page: unpinned)
                return TAIL
            if name == "device" and block in resident:
                return EITHER
            return TAIL if cached[0] else HEAD

        left = [b for b in middle if b not in present and not ref[b]]
        if left:
            return [("free queue", f"{name} pool: blocks {short(left)} left the free queue "
                                   f"and are held by nothing (the queue: {short(actual)})")]
        inside = set(middle)
        head = 0  # (the frees prepended: new to the queue, not on the tail's side)
        while head < len(actual) and actual[head] not in inside and side(actual[head]) != TAIL:
            head += 1
        stay, rest = [b for b in middle if b in present], actual[head:]
        i = j = 0
        while j < len(stay):
            if i < len(rest) and rest[i] == stay[j]:
                i, j = i + 1, j + 1
            elif side(stay[j]) != HEAD:  # (touched and freed again: on the tail now)
                j += 1
            else:
                break
        wrong = [b for b in rest[i:] if side(b) == HEAD]
        if j < len(stay) or wrong:
            where = f"{rest[i] if i < len(rest) else 'its end'} at position {head + i} where " \
                f"{stay[j]} was due" if j < len(stay) else f"on the tail's side {short(wrong)}"
            return [("free queue", f"{name} pool after the op: expected its frees uncached, "
                                   f"then {short(stay)} (the queue after its allocation, less "
                                   f"what left it), then its frees cached or unpinned; actual "
                                   f"{short(actual)}: {where}")]
        if any(b in inside for b in rest[i:]):
            self.count(REQUEUED)
        # (their order: `hisparse_order.py`, where the op's calls give it)
        return self.free_order_problems(name, actual, actual[:head], rest[i:], keys)
