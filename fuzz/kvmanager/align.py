"""The KV-cache-manager judge's reduced mode, for a Mamba group in "align" mode with prefix
caching (`Trace.mamba_mode == "align"`): kvfuzz's oracle does not model Mamba's checkpoints,
their retention, the partial (sub-block) hits they turn on or the copy-on-write of a partial
hit, so nothing here asks it what the manager should answer. What is compared instead holds
whatever the manager decides, from what the caller knows and the pool shows (each property
with a mutant it catches, `tests/kvmanager/test_align.py`):

- a hit: at most `num_tokens - 1` tokens, a multiple of the hash block; full attention's
  blocks cover it (cdiv(hit, block size) blocks), each whole one cached under the request's own
  hash of that block; the Mamba group's blocks the same count, null but the last; and its
  length exactly what the pool's cache entries before the lookup give (the hybrid fixed point:
  full attention's run and partial entry, then the latest Mamba state no deeper,
  `oracle/kvmanager/align_hit.py`): `fuzz/kvmanager/align_hits.py`;
- `allocate_slots`: None, or new blocks per group, distinct, full attention's not null (the Mamba
  group's may hold nulls, placeholders for states it does not keep), each group's now the end
  of the request's table; a step of no tokens and no hit refused (the manager raises);
- after every op (a new step started, the copy-on-write copies taken and their blocks released,
  as the scheduler does every step): the pool's invariants (`state_violations`), the free count
  the free queue's length and `usage` the same fraction, no block twice in one table, and every
  block's reference count exactly the number of live tables that hold it (a block freed too
  early, leaked or freed twice shows here; with no request live, every block is free), and
  each live request's Mamba table the states the released rule keeps
  (`oracle/kvmanager/mamba_align.py`: the state its last step read and the one it wrote,
  nothing while it waits), and every state that left its table held by no other table back
  in the pool (the rule's free side, reported before the reference counts in general):
  `fuzz/kvmanager/align_pool.py`;
- after every step, the state it reads and writes as vLLM's worker sees the Mamba table (its
  own append-only copy): `fuzz/kvmanager/align_reads.py`;
- a hit's Mamba state block cached under the request's hash of the hit in the Mamba group;
  `reset_prefix_cache` succeeds exactly when no block is held, then nothing cached;
  `evict_blocks` leaves none of the blocks it named cached; the boundary-state hand-offs
  (`take_boundary_state_offloads`, `finalize_partial_tail_offloads`): `boundary.py`.
- under retention 0, the state a resend resumes from cached once a step writes it (prefill
  chunks cut there as vLLM's scheduler cuts them): `fuzz/kvmanager/align_retention.py`.
- the lookup of a scheduler with a KV connector, asked at every admission and judged where
  full attention's lag over every Mamba state is certain: `fuzz/kvmanager/align_connector.py`;
  a connector's loads and the finish's `remove_skipped_blocks`: `align_external.py` (with
  EAGLE's drop: `align_external_eagle.py`; and multi-module MTP: `align_external_mtp.py`).
- every `allocate_slots` made exactly when vLLM 0.33.0's counts say it fits, refused when not
  (both groups' counts, the states freed before them, the watermark, the whole sequence,
  reserved blocks): `fuzz/kvmanager/align_count.py`, `oracle/kvmanager/align_count.py`.
- with tokens in flight (asynchronous scheduling): `fuzz/kvmanager/align_async.py`; with
  EAGLE's last-block drop (the hit, the checkpoint, retention 0's boundaries): `align_eagle.py`;
  Mamba's shared-prefix checkpoint and retention 0's junction states: `align_shared_prefix.py`.
- which blocks: the free queue and each group's new blocks after every op (`align_queue.py`);
  the cache entries each op adds, re-keys and evicts, from those before it (`align_caching.py`).

Not compared in this mode: which blocks are cached where `align_caching.SKIPPED` counts (live
sessions, HiSparse, a settle after a refusal, a request after an op
not judged), full attention's null positions, the scheduler's reads. (KV events,
stats: against the pool's map and hits, `align_events.py`; old refusal bounds: `align_refusal`.)
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, crash_problems, handles, short
from kvfuzz.fuzz.kvmanager import boundary
from kvfuzz.fuzz.kvmanager.align_refusal import (needless_admission_refusal, needless_refusal,
                                                 rekeyed)
from kvfuzz.fuzz.kvmanager import (align_async, align_caching, align_connector, align_count,
                                   align_eagle, align_events, align_external_mtp, align_order,
                                   align_drafts, align_lookahead, align_queue, align_reads,
                                   align_retention, align_shared_prefix)
from kvfuzz.fuzz.kvmanager.align_count import AlignCountChecks
from kvfuzz.fuzz.kvmanager.align_deferred import Unmodelled as _Unmodelled
from kvfuzz.fuzz.kvmanager.align_drafts import AlignDrafts
from kvfuzz.fuzz.kvmanager.align_external_mtp import AlignExternalMtp
from kvfuzz.fuzz.kvmanager.align_result import \
    allocation_problems as _allocation_problems
from kvfuzz.fuzz.kvmanager.align_hits import AlignHitChecks
from kvfuzz.fuzz.kvmanager.connector_cap import cap_text, capped_args
from kvfuzz.fuzz.kvmanager.align_pool import AlignPoolChecks
from kvfuzz.fuzz.kvmanager.align_queue import AlignQueueChecks
from kvfuzz.fuzz.kvmanager.align_reads import AlignReads
from kvfuzz.fuzz.kvmanager.lockstep import (RUNNING, WAITING, KVManagerLockstep, _Request,
                                            state_read)
from kvfuzz.oracle.kvmanager import mamba_align
from kvfuzz.oracle.kvmanager.model import NothingToAllocate
from kvfuzz.strategies.kvmanager.trace import (Decode, Evict, Finish, Preempt, Reset, Sample,
                                               Schedule)


class AlignLockstep(align_events.AlignEvents, align_caching.AlignCaching, AlignQueueChecks,
                    align_async.AlignAsync, align_shared_prefix.AlignSharedPrefix, AlignDrafts,
                    AlignExternalMtp, AlignCountChecks, AlignHitChecks, AlignPoolChecks,
                    AlignReads, KVManagerLockstep):
    """The target's lock step: `KVManagerLockstep` itself for every trace but a Mamba "align"
    one, which the methods below judge in the reduced mode (each delegates otherwise)."""

    EVENTS = KVManagerLockstep.EVENTS + ("copy-on-write copies taken",
                                         "Mamba prefill checkpoint block",
                                         "partial hit: inside a block",
                                         "boundary states offered",
                                         "partial tail handed off at finish",
                                         "admission padded beside a Mamba group",
                                         align_retention.CUT, align_retention.WRITTEN,
                                         *align_queue.EVENTS, *align_caching.EVENTS,
                                         *align_connector.EVENTS, *align_external_mtp.EVENTS,
                                         *align_count.EVENTS, *align_drafts.EVENTS,
                                         *align_reads.EVENTS, *align_lookahead.EVENTS,
                                         *align_eagle.EVENTS, *align_shared_prefix.EVENTS,
                                         *align_async.EVENTS, *align_events.EVENTS)

    def build_model(self, trace):
        self.align = trace.mamba_mode == "align"
        if not self.align:
            return super().build_model(trace)
        self.requests: dict[int, _Request] = {}
        self.seen: set[int] = set()
        self.ref: list[int] = [0] * trace.blocks   # the last state read's reference counts
        self.keys: list = [None] * trace.blocks    # and each block's entries
        self.cache: dict = {}                      # and its cache map, (hash, group) -> blocks
        self.evicted: tuple[int, ...] = ()         # what the last op asked evicted
        self.reset_done = False                    # whether the last op reset the cache
        self.read_from: dict[int, int] = {}        # rid -> computed tokens its last step read
        self.states: dict[int, int] = {}           # block -> rid: the Mamba states last read
        self.mamba_tables: dict[int, list] = {}    # rid -> its Mamba table at the last read,
        #                                            up to its last state (no scratch blocks)
        self.tails: dict[int, int] = {}            # rid -> the tokens of the partial tail
        #                                            its last step cached (absent: none)
        self.stepped = None                        # the request this op allocated for
        self.cached_upto: dict[int, int] = {}     # rid -> boundary its blocks were cached to
        # rid -> its tables' lengths at the last read, and whether its last step re-keyed a block
        # of its Mamba table (`align_refusal.py`)
        self.lengths: dict[int, tuple | None] = {}
        self.rekeyed: dict[int, bool] = {}
        self.checkpoints: dict[int, int] = {}     # rid -> its last step's checkpoint position
        # a KV connector's loads (`align_external.py`): rid -> the tokens its load computed,
        # until its first step, and the block of its last loaded token's Mamba state
        self.loaded_end: dict[int, int] = {}
        self.loaded_state: dict[int, int | None] = {}
        self.looked_up = False  # the connector's lookup made for the admission in this op
        # the exact counts (`align_count.py`): each request's Mamba table at the last read,
        # speculative blocks included; the requests with a copy-on-write pending; the hit's
        # blocks per group of the admission in this op
        self.mamba_rows: dict[int, list] = {}
        self.pending_copy: set[int] = set()
        self.hit_blocks = ((), ())
        self.drafted_to: dict[int, int] = {}  # rid -> its draft step's end, rolled back since
        self.start_worker()  # the worker's tables, steps in flight (`align_reads`, `align_async`)
        self.count_configs(trace)
        self.start_events(trace)  # KV events and stats (`align_events.py`)
        return _Unmodelled([1, 0] if trace.full_last else [0, 1])  # (`align_deferred.py`)

    def initial_problems(self):
        return self._pool_problems() if self.align else super().initial_problems()

    # -- ops ----------------------------------------------------------------------------------
    @handles(Schedule)
    def schedule(self, op: Schedule):
        if not self.align:
            return (yield from super().schedule(op))
        request = self.requests.get(op.rid)
        if request is None:
            return
        if request.status == WAITING and (request.computed or op.rid in self.loaded_end):
            return (yield from self._resume_loaded(op.rid, request, op.chunk, op.pad,
                                                   op.rows_in_flight))
        if request.status == WAITING:
            yield from self._connector_lookup(op.rid, request, op.max_hit)  # (sets its cap)
            got = yield Call(f"get_computed_blocks(r{op.rid}{cap_text(request.cap)})",
                             "get_computed_blocks", capped_args(op.rid, request.cap),
                             oracle=None, compare=lambda e, r, actual, raised:
                             self._hit_problems(request, actual, raised))
            self.hit_blocks, hit, request.boundary = got.actual
            self.count("admission with a hit" if hit else "admission, no hit")
            if hit % self.trace.block_size:
                self.count("partial hit: inside a block")
            rows = self._padded(len(request.tokens) - hit, hit, op.chunk, op.pad,
                                "beside a Mamba group")  # (`padding.py`: its rows judged)
            held = self.rows_held(rows, op.rows_in_flight)  # (asynchronous: to its `settle`)
            return (yield from self._allocate(op.rid, request, self._chunk(
                request, hit, min(op.chunk, len(request.tokens) - hit)) + rows, hit,
                0 if held else rows))
        pending = len(request.tokens) - request.computed
        if pending > 0 and request.status == RUNNING:  # (not while its KV load is in flight)
            self.count("prefill chunk")
            return (yield from self._allocate(op.rid, request, self._chunk(
                request, request.computed, self.align_chunk(op, request, pending)), None))

    @handles(Decode, Sample)
    def decode(self, op):
        if not self.align:
            return (yield from super().decode(op))
        request = yield from self._sample(op)
        if request is not None:
            return (yield from self._allocate(op.rid, request, 1, None))

    @handles(Preempt, Finish)
    def free(self, op):
        """A finish asks the finished request's partial tail first, as a KV producer's scheduler
        does before the free (`boundary.tail_problems`); then the shared free."""
        request = self.requests.get(op.rid)
        if self.align and self.refusal_unmade(op, request):  # (`align_async.py`)
            return
        if self.align and isinstance(op, Finish) and request is not None:
            table = (yield Call("", "block_ids", (op.rid,), oracle=None,
                                compare=state_read)).actual
            self.model.read[op.rid] = table  # (a deferred free pops it: `align_deferred.py`)
            keyed, flying = self.tail_in_flight(op.rid, request)  # (`align_async.py`)

            def compare(expected, rejected, actual, raised):
                if raised is not None:
                    return crash_problems(raised)
                if actual:
                    self.count("partial tail handed off at finish")
                tail = align_order.tail(align_order.order(self.trace), actual)  # group ids
                return boundary.tail_problems(tail, op.rid, request, self._states(table[-1]),
                                              keyed, self.trace.block_size,
                                              self.trace.hash_size)
            yield Call(f"finalize_partial_tail_offloads(r{op.rid})", "finalize_tail",
                       (op.rid, *flying), oracle=None, compare=compare)
        if self.align and op.defer and request is not None and isinstance(op, Preempt):
            self.model.read[op.rid] = (yield Call("", "block_ids", (op.rid,), oracle=None,
                                                  compare=state_read)).actual  # (a preemption)
        if self.align:
            self.tails.pop(op.rid, None)  # a preempted request's blocks go: no tail kept
            self.cached_upto.pop(op.rid, None)
            self.pending_copy.discard(op.rid)
            self.flights_forget(op.rid)  # (its checkpoint and draft end too)
        problems = yield from super().free(op)
        if self.align and isinstance(op, Finish):
            self._forget(op.rid)  # (a connector's load: `align_external`)
        return problems

    @handles(Evict)
    def evict(self, op: Evict):
        if not self.align:
            return (yield from super().evict(op))
        self.evicted = tuple(sorted({b for b in op.block_ids if 0 < b < self.trace.blocks}))
        self.count("evict")
        yield Call(f"evict_blocks({set(self.evicted) or '{}'})", "evict_blocks",
                   (list(self.evicted),), oracle=None)

    @handles(Reset)
    def reset(self, op: Reset):
        if not self.align:
            return (yield from super().reset(op))
        held = any(self.ref[1:])  # the pool refuses while any block is held

        def compare(expected, rejected, actual, raised):
            if raised is not None:
                return crash_problems(raised)
            return [] if actual is (not held) else [
                ("result", f"reset_prefix_cache: expected {not held} ("
                           f"{'blocks held' if held else 'no block held'}), actual "
                           f"{short(actual)}")]
        got = yield Call("reset_prefix_cache()", "reset_prefix_cache", (), oracle=None,
                         compare=compare)
        self.reset_done = got.actual is True
        self.count("reset" if self.reset_done else "reset refused")

    # -- allocation ---------------------------------------------------------------------------
    def _chunk(self, request, start: int, new: int) -> int:
        """A prefill chunk of `new` tokens from `start`: under retention 0 cut as vLLM's
        scheduler cuts it, where the state a resend resumes from is written
        (`align_retention.py`)."""
        cut = align_retention.chunk(self.trace, request, start, new)
        if cut != new:
            self.count(align_retention.CUT)
        return self.junction_cut(request, start, cut)  # (`align_shared_prefix.py`)

    def _allocate(self, rid, request, new, hit, placeholders: int = 0):
        admission = hit is not None
        in_flight = self.align_in_flight(request, admission)  # (`align_async.py`)
        args = (rid, new, hit or 0, admission, admission and self.trace.full_sequence_must_fit,
                any(r.status == RUNNING for other, r in self.requests.items() if other != rid),
                in_flight)
        if new == 0 and not hit:
            self.count("allocate_slots of nothing refused")

            def refuse():
                raise NothingToAllocate(f"r{rid}: no new tokens and no hit to adopt")
            yield Call(f"allocate_slots(r{rid}, 0)", "allocate_slots", args, oracle=refuse)
            return []
        got = yield Call(f"allocate_slots(r{rid}, {new}{f', hit {hit}' if admission else ''})",
                         "allocate_slots", args, oracle=None, compare=_allocation_problems)
        self.queue_alloc = (rid, admission)  # (`align_queue.py`)
        counted = self._count_problems(rid, request, got.actual is not None, new, args[5],
                                       hit=hit, in_flight=in_flight)
        if got.actual is None:
            self.count("allocate_slots refused")
            # (a refused step has freed every state but the last: its checkpoint too)
            if not in_flight:  # (with tokens in flight only below the processed one: `align_async`)
                self.checkpoints.pop(rid, None)
            trace = self.trace
            wrong = needless_admission_refusal(
                trace.block_size, max(len(request.tokens), request.computed + (hit or 0) + new),
                trace.lookahead, trace.mamba_speculative, int(trace.watermark * trace.blocks),
                sum(1 for count in self.ref[1:] if count == 0)) if admission else \
                needless_refusal(trace.block_size, trace.lookahead, request.computed, new,
                                 self.lengths.get(rid), self.rekeyed.get(rid, True),
                                 trace.mamba_speculative)
            return counted + ([("refusal", wrong)] if wrong else [])
        self.count("allocate_slots ok")
        tables = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        problems = [("result", f"allocate_slots: group {group}'s new blocks {short(fresh)} are "
                               f"not the end of r{rid}'s table {short(table)}")
                    for group, (fresh, table) in enumerate(zip(got.actual, tables))
                    if fresh and table[-len(fresh):] != fresh][:1]
        self.stepped = rid
        if admission:  # its blocks cached so far: the hit's, none past it
            self.cached_upto[rid] = hit or 0
        self.read_from[rid] = request.computed + (hit or 0)
        self.drafts_allocated(rid, request.computed + (hit or 0) + new)  # (`align_drafts.py`)
        request.computed += (hit or 0) + new
        self._checkpoint(rid, request)
        for event in align_lookahead.events(self.trace, hit, request.computed,
                                            rid in self.checkpoints) + align_eagle.events(
                self.trace, hit, request.computed, rid in self.checkpoints):
            self.count(event)
        self.flights_allocated(rid, request, in_flight)  # (`align_async.py`)
        request.status = RUNNING
        if placeholders:  # a padded admission's rows rejected at once (`padding.py`)
            self.drafted_to[rid] = request.computed  # its table the step's, as after drafts
            request.computed -= placeholders
        yield Call("", "set_computed", (rid, request.computed, RUNNING), oracle=None)
        yield from self.align_record(rid, request, hit)  # an admission's stats (`align_events`)
        return counted + problems

    def _checkpoint(self, rid, request) -> None:
        """Note the checkpoint block the step just allocated takes (`mamba_align`), if any."""
        trace = self.trace
        # the coordinator passes the prompt's end only under retention 0
        prefill_end = max(request.prompt, len(request.tokens) - 1) if trace.retention == 0 \
            else 0
        index = mamba_align.checkpoint_index(self.read_from[rid], request.computed, prefill_end,
                                             trace.block_size, trace.hash_size,
                                             trace.mamba_checkpoint, trace.hash_lookahead,
                                             trace.eagle)
        if index is None:
            self.checkpoints.pop(rid, None)
        else:
            self.checkpoints[rid] = index
            self.count("Mamba prefill checkpoint block")

    # -- after the op -------------------------------------------------------------------------
    def state(self, op) -> list[tuple[str, str]]:
        if not self.align:
            return super().state(op)
        # What the scheduler does every step: a new step starts (a Mamba group refuses a hit on
        # a state cached in the same step, and forgets those only here), then the copies are
        # taken and released
        self.read("new_step_starts")
        copies = self.read("release_copies")
        self.queue_op, self.queue_copies = op, copies  # (`align_queue.py`)
        if copies:
            self.count("copy-on-write copies taken")
        offloads = align_order.offloads(  # drained every step, as a connector does
            align_order.order(self.trace), self.read("boundary_offloads"))
        if offloads:
            self.count("boundary states offered")
        observed = self.take_observed()  # KV events and stats (`align_events.py`)
        before = self.keys
        rid = getattr(op, "rid", None)
        problems = self._pool_problems() + self.observed_problems(observed, rid)
        request = self.requests.get(rid)
        # the tail the request's step before keyed, if this op copied it (`copied_tail`)
        evicted_tail = self.copied_tail(rid) if copies else None
        if request is not None and self.stepped == rid:
            # whether this step cached its partial tail (a finish then hands it off; an op
            # that allocated nothing changes nothing, even if an eviction dropped the entry)
            # (a prefill checkpoint's block is re-keyed or dropped with no copy-on-write
            # pending: `_cache_partial_tail_block` returns before it records one)
            checkpoint = self.checkpoints.get(rid)
            self.rekeyed[rid] = rekeyed(before, self.keys, [
                b for i, b in enumerate(self.mamba_tables.get(rid, [])) if i != checkpoint])
            if boundary.tail_keyed(request, self.mamba_tables.get(rid, []), self.keys,
                                   self.trace.block_size, self.trace.hash_size,
                                   self.trace.hash_lookahead):
                self.tails[rid] = request.computed
            else:
                self.tails.pop(rid, None)
            self._note_copy(rid, request, True, before)
            if request.status == RUNNING:  # (a load reported is judged as a step above)
                problems += self.read_step_problems(rid, request)
                self.flight_read(rid)  # (`align_async.py`)
            if rid not in self.loaded_end:  # (a load writes no state a step to it would)
                problems += self._retention_problems(rid, request) + \
                    self.junction_problems(rid, request)
        self.stepped = None
        problems += self.flight_read_problems()  # (`align_async.py`)
        self.leave_worker()
        since = self.cached_upto.get(rid, 0)
        if request is not None:  # what this op cached, at most (a step caches its full blocks)
            self.cached_upto[rid] = max(since, align_eagle.cached_blocks(self.trace, request))
        return problems + boundary.offload_problems(
            offloads, rid, self.as_loaded(rid, request), before, self.keys, self.trace.block_size,
            self.trace.hash_size, since, evicted_tail, self.mamba_tables.get(rid, ()),
            self.trace.hash_lookahead, align_eagle.held_back(self.trace))

    def _retention_problems(self, rid, request) -> list[tuple[str, str]]:
        """Under retention 0, the state a resend resumes from cached once written
        (`align_retention.py`)."""
        written, wrong = align_retention.step_problem(self.trace, request,
                                                      self.mamba_tables.get(rid, []),
                                                      self._entries, self.read_from.get(rid, 0))
        if written:
            self.count(align_retention.WRITTEN)
        return [("retention", f"r{rid}: {wrong}")] if wrong else []
