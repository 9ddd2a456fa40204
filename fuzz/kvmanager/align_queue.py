"""Which blocks, in the reduced mode of a Mamba "align" group (`align.py`): after every op, the
free queue the released pool must hold and the blocks each group's allocation took, predicted
from the queue, reference counts and entries read at the end of the op before
(`oracle/kvmanager/align_queue.py`), with the op's pool calls in vLLM 0.33.0's order:

- an allocation (`allocate_slots`, a connector's admission or resumed step): the Mamba states
  `remove_skipped_blocks` frees (read from the tables: the positions it nulled, freed last
  first in one call; `mamba_align.table_problems` judges which; before any refusal), then,
  unless refused, an admission's hit blocks touched, a connector's external blocks taken
  group by group, then each group's new blocks in the manager's group order (the copy-on-write
  block of a partial hit first: in the table at the hit's last position for an admission, in
  no table for a running request, whose cache entries move to it), then the scheduler's
  release of the copies' endpoints (source, copy, group by group, one call; cached per the
  entries read after the op, as `cache_blocks` ran before);
- a finish, a preemption or a failed load: `free(request)`, each group in the manager's order,
  the table without its leading nulls, last block first (`request_free`);
- every other op of these profiles makes no pool call that moves the queue (an eviction or a
  reset changes entries only; an output settled or a load reported caches) but the frees of a
  connector's `remove_skipped_blocks`: as an allocation's.

What each group took is compared exactly (the blocks the op added to each table, in order,
against the queue's head after the frees and touches before them), then the whole queue, head
first; and, but across an eviction or a reset (the pool-wide checks judge those), a block free
before the op and not taken keeps its entries (no other block evicted for it). The numbers of
blocks taken and freed are the other checks' (`align_count.py`, `align_pool.py`); only the
order is predicted here. Not predicted: an engine's scheduler (`queue_problems`).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.oracle.kvmanager.align_queue import QueueModel, request_free, skipped_frees
from kvfuzz.strategies.kvmanager.trace import Connect, Finish, Preempt

EXTERNAL = "external"  # an admission with a connector's external tokens
EVENTS = ("free queue predicted after a copy-on-write",
          "free queue predicted after a connector's admission")


class AlignQueueChecks:
    """A mixin of `AlignLockstep`: `queue_problems` runs in `_pool_problems` with what it read."""

    queue_prev: list | None = None   # the free queue at the last read, head first
    queue_tables: dict = {}          # rid -> its tables at the last read (trace group order)
    queue_op = None                  # the op being judged (set by `state`)
    queue_alloc = None               # the op's allocation, if any: (rid, admission: True or
    #                                  False), or (rid, EXTERNAL, local hit, external tokens)
    queue_copies = 0                 # copy-on-write copies the op queued
    live_session = False             # an engine's scheduler drives the manager (`guard.py`)

    def _admit_external(self, op: Connect, request, local: int, external: int):
        self.queue_alloc = (op.rid, EXTERNAL, local, external)
        return (yield from super()._admit_external(op, request, local, external))

    def _resume_loaded(self, rid, request, chunk: int, *padding):
        self.queue_alloc = (rid, False)  # (no lookup: a running request's allocation)
        return (yield from super()._resume_loaded(rid, request, chunk, *padding))

    def queue_problems(self, queue: list, ref: list, keys: list, tables: dict
                       ) -> list[tuple[str, str]]:
        prev, before = self.queue_prev, self.queue_tables
        op, alloc, copies = self.queue_op, self.queue_alloc, self.queue_copies
        self.queue_prev, self.queue_tables = list(queue), tables
        self.queue_op, self.queue_alloc, self.queue_copies = None, None, 0
        if prev is None or op is None or len(ref) != len(self.ref) or self.live_session:
            # (the last: an engine's scheduler drives the manager, `kvfuzz.guard`, which sets
            # it for every live session: its steps span several ops, and it frees the copies'
            # endpoints, and defers frees, at a step's end the ops do not mark: not predicted;
            # the session's recording, replayed, is judged by this check)
            return []
        old = self.keys
        model = QueueModel(prev, self.ref, lambda block: old[block] is not None)
        self.queue_evicted = model.evicted  # (the cached blocks popped: `align_caching.py`)
        order = [1, 0] if self.trace.full_last else [0, 1]
        name = getattr(op, "rid", None)
        name = f"{type(op).__name__.lower()}{'' if name is None else f'(r{name})'}"
        problems, taken, endpoints = [], set(), []
        rid = alloc[0] if alloc is not None else getattr(op, "rid", None)
        was, got = before.get(rid) or [[], []], tables.get(rid) or []
        if getattr(op, "defer", False):  # its blocks popped, held until released
            pass  # (`align_deferred.py`)
        elif type(op).__name__ == "Release":  # one call, last popped first
            model.free(list(reversed(self.model.released)))
            self.model.released = []
        elif alloc is None and any(was) and not any(got):  # a finish, preemption, failed load
            request_free(model, was, order)
        elif len(was) == 2 and len(got) == 2:
            # (an op allocating nothing frees only what `remove_skipped_blocks` nulls)
            model.free(skipped_frees(was[1], got[1], self.trace.mamba_speculative))
            if alloc is not None:
                problems = self._queue_taken(model, name, alloc, was, got, copies, order,
                                             taken, endpoints)
        if endpoints:  # released after the op's allocations, in one call, in the order queued
            model.cached = lambda block: keys[block] is not None
            model.free(endpoints)
        if model.queue != queue:
            at = next((i for i, (a, b) in enumerate(zip(model.queue, queue)) if a != b),
                      min(len(model.queue), len(queue)))
            problems.append(("free queue", f"after {name}: expected {short(model.queue)}, "
                             f"actual {short(queue)} (first difference at position {at})"))
        if not problems and type(op).__name__ not in ("Evict", "Reset"):
            lost = [b for b in prev if b not in taken and keys[b] != old[b]][:4]
            if lost:
                problems.append(("which blocks", f"after {name}: free blocks {lost} not taken "
                                 f"changed entries: {[old[b] for b in lost]} -> "
                                 f"{[keys[b] for b in lost]}"))
        return problems[:2]

    def _queue_taken(self, model, name, alloc, was, got, copies, order, taken, endpoints):
        """The rest of an allocation after the Mamba frees: an admission's touches, each
        group's pops (a connector's external blocks first, group by group); what each group
        took against the queue's head. The copies' endpoints, in the order queued, go to
        `endpoints`."""
        problems, admission = [], alloc[1]
        if admission and any(got):  # (a refused admission touches nothing)
            hit = self.hit_blocks
            if admission == EXTERNAL:  # the Mamba hit's state below the external tokens: skipped
                hit = (hit[0], hit[1][(sum(alloc[2:]) - 1) // self.trace.block_size:])
            for blocks in hit:
                model.touch(blocks)
                taken.update(blocks)  # (held by the request: cached anew, maybe)
        fresh, retained, hidden = self._queue_fresh(was, got, alloc, copies)
        for phase in fresh:
            for group in order:
                expected = model.pop(len(phase[group]) + (group == 1 and hidden))
                taken.update(expected)
                if group == 1 and hidden and expected:
                    # the copy: in no table, its one reference the copy's (its source holds
                    # one more until the release, in this op: no change), released below
                    retained[1], expected = [0, expected[0]], expected[1:]
                    self.queue_copy = retained[1][1]  # (where its entries move: `align_caching`)
                if expected != phase[group]:
                    problems.append(("which blocks", f"{name}: group {group} took "
                                     f"{short(phase[group])}, expected {short(expected)} (the "
                                     f"free queue's head, after the op's frees and touches)"))
        if admission is True:  # the copies' endpoints: one more reference until released
            for group in order:
                for block in retained[group][1::2]:
                    model.hold(block)
        if copies:
            self.count("free queue predicted after a copy-on-write")
        endpoints += [b for group in order for b in retained[group]]
        return problems

    def _queue_fresh(self, was, got, alloc, copies):
        """What each group took, in the order taken, per phase of pops (per group, the
        manager's order within a phase); each group's copy endpoints (source, copy) released
        after the op; whether a running request's Mamba copy (in no table) was taken first."""
        fresh, retained, hidden = [[], []], [[], []], False
        if alloc[1] == EXTERNAL:
            # A connector's admission (its local hit block-aligned: `align_external.connect`
            # drops a partial one, so no copy): every group's blocks for the external tokens
            # (`allocate_external_computed_blocks`, after every touch), then the new ones
            self.count("free queue predicted after a connector's admission")
            end = -(-sum(alloc[2:]) // self.trace.block_size)
            external = [[b for b in table[len(hit):end] if b]
                        for table, hit in zip(got, self.hit_blocks)]
            return [external, [[b for b in table[end:] if b] for table in got]], retained, hidden
        if alloc[1]:
            for group, hit in enumerate(self.hit_blocks):
                table, count = got[group], len(hit)
                if count and len(table) >= count and table[count - 1] != hit[-1]:
                    fresh[group].append(table[count - 1])  # the partial hit's copy
                    retained[group] = [hit[-1], table[count - 1]]
                fresh[group] += [b for b in table[count:] if b]
            return [fresh], retained, hidden
        spec = self.trace.mamba_speculative
        moved = {b for b in was[1][len(was[1]) - spec:] if b} if spec else set()
        fresh[0] = [b for b in got[0][len(was[0]):] if b]
        fresh[1] = [b for b in got[1][len(was[1]):] if b and b not in moved]
        # a running request's partial tail copied: its copy taken first, its entries moved to
        # it, released (its last reference) once the copy ran
        return [fresh], retained, bool(copies)
