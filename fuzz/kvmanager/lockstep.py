"""The KV-cache-manager judge on the shared lock step (`kvfuzz.fuzz.engine.lockstep`): the oracle
(`oracle.kvmanager`) and an implementation driven as vLLM's scheduler drives them (admission
through the prefix cache, chunked prefill, decode, preemption, finish), compared after every
op: the hit (blocks per group, hit tokens, shared-prefix boundary), allocate_slots' result
(None, or the new blocks per group), that a successful allocation consumed exactly the blocks
its check counted, every live request's block table per group, and the whole pool
(`fuzz.blockpool.pool_state.pool_problems`: free queue order and links, reference counts,
hashes, the hash map, invariants). The reads after every op: `state_reads.py`; the
configurations and marks a trace is counted by: `configs.py`; single answers' comparisons:
`hit_compare.py`.
"""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.blockpool.pool_state import pool_problems
from kvfuzz.fuzz.engine.lockstep import Call, Lockstep, crash_problems, handles, short
from kvfuzz.fuzz.kvmanager import async_ops, connector, cut, streaming
from kvfuzz.fuzz.kvmanager.async_ops import AsyncOps
from kvfuzz.fuzz.kvmanager.configs import CONFIGS, MARKS
from kvfuzz.fuzz.kvmanager.cut import CutOps
from kvfuzz.fuzz.kvmanager.connector import ConnectorOps, state_read
from kvfuzz.fuzz.kvmanager.key_marks import MARKS as KEY_MARKS
from kvfuzz.fuzz.kvmanager.key_marks import KeyMarks
from kvfuzz.fuzz.kvmanager.embeds_marks import CONFIGS as EMBEDS_CONFIGS
from kvfuzz.fuzz.kvmanager.embeds_marks import MARKS as EMBEDS_MARKS
from kvfuzz.fuzz.kvmanager.embeds_marks import EmbedsMarks
from kvfuzz.fuzz.kvmanager.lookahead_marks import MARKS as LOOKAHEAD_MARKS
from kvfuzz.fuzz.kvmanager.lock_request import RUNNING, WAITING, _Request  # noqa: F401 (read here)
from kvfuzz.fuzz.kvmanager.lookahead_marks import LookaheadMarks
from kvfuzz.fuzz.kvmanager.free_ops import PREEMPTED_BY_REFUSAL, FreeOps
from kvfuzz.fuzz.kvmanager.connector_cap import lookup_cap
from kvfuzz.fuzz.kvmanager.live_lookups import LiveLookups
from kvfuzz.fuzz.kvmanager.hit_compare import boundary_of, hit_compare
from kvfuzz.fuzz.kvmanager.padding import PADDED, placeholder_rows
from kvfuzz.fuzz.kvmanager.state_reads import StateReads
from kvfuzz.fuzz.kvmanager.streaming import StreamingOps
from kvfuzz.fuzz.kvmanager import sync_draft_ops
from kvfuzz.fuzz.kvmanager.sync_draft_ops import SyncDraftOps
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.oracle.kvmanager.model import (EAGLE_APART, MAMBA_SPECULATIVE, MTP_HELD,
                                           KVManagerModel, NothingToAllocate)
from kvfuzz.strategies.kvmanager import trace as kvmanager
from kvfuzz.strategies.kvmanager.released import (NO_BOUNDARY, NO_HIT_ALONE, NO_RECORD,
                                                  NO_TRUNCATE)
from kvfuzz.strategies.kvmanager.trace import Arrive, Decode, Sample, Schedule


class KVManagerLockstep(FreeOps, StateReads, StreamingOps, AsyncOps, SyncDraftOps, ConnectorOps,
                        CutOps, LiveLookups, Lockstep):
    KINDS = kvmanager.KINDS
    REJECTIONS = (NothingToAllocate,)  # allocate_slots of nothing: the manager raises too
    unread: frozenset = frozenset()  # the reads the class does not have (`build_impl`)
    # preemptions made so far (a chunk made `again` needs one since its refusal); a class
    # default for the subclasses whose `build_model` is their own (only ever compared)
    preemptions = 0
    EVENTS = ("arrive", "admission with a hit", "admission, no hit", "prefill chunk", "decode",
              "decode into a new block", "sample, no slot", "allocate_slots ok",
              "allocate_slots refused", "allocate_slots refused: the whole request does not fit",
              "window frees blocks", "preempt", "finish", "evict", "reset", "reset refused",
              "arrive, skipping the prefix cache", "allocate_slots of a hit alone",
              "allocate_slots of nothing refused", "hit truncated", "hit reported",
              "events published", "event: block removed", "stats recorded",
              "window frees blocks with tokens in flight", "free deferred (pop_blocks_for_free)",
              "free deferred during its KV load", "deferred free released",
              "skipped blocks removed before request_finished",
              "admission padded with placeholder drafts", "admission padded after a hit",
              "placeholder drafts past a block's end", "lookup capped by the caller", *PADDED,
              *MARKS, *connector.EVENTS, *cut.EVENTS, *async_ops.EVENTS, *streaming.EVENTS,
              *KEY_MARKS, *LOOKAHEAD_MARKS, *sync_draft_ops.EVENTS,
              *EAGLE_APART, MTP_HELD, *MAMBA_SPECULATIVE,
              *EMBEDS_MARKS, PREEMPTED_BY_REFUSAL,
              *(f"config: {name}" for name in CONFIGS))

    def build_model(self, trace):
        self.requests: dict[int, _Request] = {}
        self.preemptions = 0
        self.seen: set[int] = set()
        self.view = Counter()  # what a consumer of the implementation's KV events believes
        self.key_marks = KeyMarks(self.count, trace.hash_size)
        self.lookahead_marks = LookaheadMarks(self.count, trace.hash_size) \
            if trace.hash_lookahead else None
        self.embeds_marks = EmbedsMarks(self.count, trace.hash_size) \
            if EMBEDS_CONFIGS["prompt embeddings"](trace) else None
        self.count_configs(trace)
        model = KVManagerModel(trace.blocks, trace.block_size, trace.window, trace.max_model_len,
                               trace.retention, trace.max_in_flight_tokens, trace.watermark,
                               trace.caching, trace.events, trace.stats, trace.lookahead,
                               trace.eagle, trace.retained, trace.window_block_size,
                               trace.hash_block_size, trace.local_chunk, trace.mamba_mode,
                               trace.encoder_tokens, trace.zeroing, trace.hash_lookahead,
                               trace.eagle_groups, trace.prefill_lookahead, trace.lone,
                               trace.first_window, trace.full_last,
                               mamba_speculative=trace.mamba_speculative)
        model.adopts_hit_alone = NO_HIT_ALONE not in self.unread
        return model

    def count_configs(self, trace) -> None:
        for name, applies in CONFIGS.items():
            if applies(trace):
                self.count(f"config: {name}")

    def build_impl(self, trace, cls, device, unread=frozenset()):
        from kvfuzz.impl.kvmanager.driver import KVManagerDriver  # imports vLLM

        # the reads an earlier release's class does not have (strategies/kvmanager/released.py)
        self.unread = unread

        return make(KVManagerDriver, cls, trace.blocks, trace.block_size, trace.window,
                    trace.max_model_len, trace.retention, trace.max_in_flight_tokens,
                    trace.watermark, trace.caching, trace.events, trace.stats, trace.lookahead,
                    trace.eagle, trace.retained, trace.window_block_size, trace.hash_block_size,
                    trace.local_chunk, trace.mamba_mode, trace.encoder_tokens, trace.zeroing,
                    trace.dcp, trace.hash_lookahead, trace.eagle_groups,
                    trace.prefill_lookahead, trace.mamba_checkpoint,
                    trace.mamba_speculative, trace.hisparse, trace.lone,
                    trace.first_window, trace.full_last, trace.mamba_shared_prefix)

    def initial_problems(self):
        return pool_problems(self.impl, self.model.pool, "constructor", writable=False,
                             lock=self)

    # -- ops ----------------------------------------------------------------------------------
    @handles(Arrive)
    def arrive(self, op: Arrive):
        if op.rid in self.seen or len(op.tokens) > self.trace.max_model_len:
            return
        self.seen.add(op.rid)
        keys = op.keys
        # (a prompt of embeddings: its token ids zeros, its embeddings in its keys)
        self.requests[op.rid] = _Request(op.token_ids, op.no_cache_read, keys)
        self.count("arrive, skipping the prefix cache" if op.no_cache_read else "arrive")
        # the extra keys passed only where the request has some (older transcripts unchanged)
        more = (keys.lora, keys.lora_path, keys.salt, keys.images) if keys else ()
        more += (True,) if op.embeds else ()
        if keys:
            self.model.request_keys[op.rid] = keys
            self.key_marks.arrived(keys, len(op.tokens))
        yield Call(f"r{op.rid} arrives ({len(op.tokens)} tokens)", "arrive",
                   (op.rid, op.tokens, op.no_cache_read, self.trace.report, *more), oracle=None)

    @handles(Schedule)
    def schedule(self, op: Schedule):
        request = self.requests.get(op.rid)
        if request is None or request.status == connector.LOADING or \
                (op.again and request.status != RUNNING):  # it waits for its load; or a
            return  # chunk made again of a request no longer running (preempted itself)
        if request.status == WAITING and request.computed:  # its KV load done (or a streaming
            # update taken): no lookup
            self.count("resumed after a streaming update" if request.streamed else
                       "resumed after its load")
            if request.streamed and request.in_flight and self.trace.async_scheduling:
                self.count(streaming.RESUMED_IN_FLIGHT)
            left = len(request.tokens) - request.computed
            rows = self._padded(left, request.computed, op.chunk, op.pad, "after its load")
            new = min(op.chunk, left) + rows
            yield Call(f"allocate_slots(r{op.rid}, {new}) after "
                       f"{'a streaming update' if request.streamed else 'its load'}"
                       f"{f': {rows} placeholder drafts' if rows else ''}")
            held = self.rows_held(rows, op.rows_in_flight)  # (async_ops.py)
            return (yield from self._allocation(op.rid, request, new, 0, None, resumed=True,
                                                placeholders=0 if held else rows))
        if request.status == WAITING:
            yield from self._admit(op.rid, request, op.chunk, op.pad, op.rows_in_flight,
                                   op.max_hit)
            return
        pending = len(request.tokens) - request.computed
        if op.again and not (pending > 0 and self.made_again(request)):
            return  # its chunk was not refused: it has its slots
        if pending > 0:  # a chunk of 0 is the caller's bug, refused
            # (past its tokens: the placeholders of a failed synchronous load's cut,
            # connector.py)
            new = self.draft_step(op, request, pending)  # (with drafts: sync_draft_ops.py)
            self.count("prefill chunk")
            if new > pending and (request.ghost or request.owed):  # (not a draft step's)
                self.count(connector.GHOST_SCHEDULED)
            yield Call(f"allocate_slots(r{op.rid}, {new})")
            return (yield from self._allocation(op.rid, request, new, 0, None))

    @handles(Decode, Sample)
    def decode(self, op):
        request = yield from self._sample(op)
        if request is None:
            return
        if len(request.tokens) % self.trace.block_size == 1 or self.trace.block_size == 1:
            self.count("decode into a new block")
        yield Call(f"allocate_slots(r{op.rid}, 1)")
        return (yield from self._allocation(op.rid, request, 1, 0, None))

    def _sample(self, op):
        """A running request whose tokens are all computed samples the op's token: the request
        whose slot is asked next (a decode), or None (a sample asks none; or the op resolves
        to nothing). A decode needs every token computed and none more (a `placeholder`'s
        slot waits for its `sample`); a stale sample, a waiting request (`async_ops.py`)."""
        request = self.requests.get(op.rid)
        stale = isinstance(op, Sample) and op.stale
        if request is None or (not self.stale_token(op, request) if stale else (
                request.status != RUNNING or
                (request.computed < len(request.tokens) and not request.owed) or
                len(request.tokens) >= self.trace.max_model_len or
                (isinstance(op, Decode) and request.computed != len(request.tokens)))):
            return None
        request.tokens.append(op.token)
        request.owed = 0 if not stale else request.owed
        yield Call(f"r{op.rid} samples {op.token}{' (stale output)' if stale else ''}",
                   "append_token", (op.rid, op.token), oracle=None)
        if stale:
            self.count("stale token after a preemption")
            return None
        if isinstance(op, Sample):  # no slot asked: the next allocation schedules the token
            self.count("sample, no slot")
            return None
        self.count("decode")
        return request

    def _counted(self, text: str, method: str, args: tuple, event: str, compare=None) -> Call:
        """A call the model answers by the same name, its event counted as it answers."""
        def answer():
            expected = getattr(self.model, method)(*args)
            self.count(event if expected is not False else f"{event} refused")
            return expected
        return Call(text, method, args, oracle=answer, compare=compare)

    # -- admission and allocation -------------------------------------------------------------
    def _hashes(self, request: _Request) -> list[int]:
        # per hash unit, as vLLM's request (each covering the tokens after it it looks ahead to)
        if request.rehash and request.status == WAITING and not request.computed:
            # a lookup of a resumable request: the scheduler clears its hashes and makes them
            # again from its tokens first, under lookahead hashing (scheduler.py 1111)
            request.rehash, request._hashes = False, []
            self.count(streaming.REHASHED)
        return request.hashes(self.trace.hash_size, self.trace.hash_lookahead)

    def _admit(self, rid: int, request: _Request, chunk: int, pad: int = 0,
               rows_in_flight: bool = False, max_hit: int = -1):
        report = self.trace.report
        cap = lookup_cap(max_hit, len(request.tokens))  # (`Schedule.max_hit`: connector_cap.py)
        expected = self.model.get_computed_blocks(self._hashes(request), len(request.tokens),
                                                  request.tokens, request.skip, report,
                                                  request.keys, cap)
        if cap >= 0:
            self.count("lookup capped by the caller")
        self.key_marks.admitted(request, self._hashes(request), expected[1], self.model.pool)
        for marks in (self.lookahead_marks, self.embeds_marks):
            if marks:
                marks.admitted(request, self._hashes(request), expected[1], self.model.pool)
        yield Call(f"get_computed_blocks(r{rid}{f', max {cap}' if cap >= 0 else ''}) -> "
                   f"{short(expected, 60)}", "get_computed_blocks",
                   (rid,) if cap < 0 else (rid, cap), oracle=lambda: expected,
                   compare=self._hit_compare)
        hit_blocks, hit, request.boundary = expected
        self._count_marks()
        self.count("admission with a hit" if hit else "admission, no hit")
        self.relooked(request, rid)  # (a one-token prompt loaded whole: connector.py)
        if hit and report:
            self.count("hit reported")
        new = min(chunk, len(request.tokens) - hit)
        rows = self._padded(len(request.tokens) - hit, hit, chunk, pad,
                            "after a hit" if hit else None)
        new += rows
        yield Call(f"allocate_slots(r{rid}, {new}, hit {hit})"
                   f"{f': {rows} placeholder drafts' if rows else ''}")
        held = self.rows_held(rows, rows_in_flight)  # (async_ops.py)
        problems = yield from self._allocation(rid, request, new, hit, hit_blocks,
                                               placeholders=0 if held else rows)
        size = self.trace.scheduler_block_size  # an endpoint every group's blocks end on
        if problems or hit < size or NO_TRUNCATE in self.unread:
            return problems
        # The lookup cut at an aligned point, as the scheduler cuts a local hit that a longer
        # external load covers: a read, after the admission (a live guard sees it there too).
        self.count("hit truncated")
        end = hit if hit // size % 2 else hit - size  # at its end, or a block short of it
        yield Call(f"truncate_computed_blocks(r{rid}'s hit, {end})", "truncate", (rid, end),
                   oracle=lambda: self.model.truncate(hit_blocks, end), compared=True)
        return []

    def _padded(self, left: int, computed: int, chunk: int, pad: int, where) -> int:
        """The placeholder rows an allocation of a waiting request is padded with
        (`padding.placeholder_rows`), its edge classes counted: `where` it was padded ("after
        a hit": a prompt met again, or a preempted request back; "after its load";
        "under a connector"), and the rows past a block's end (they alone need a block)."""
        rows = placeholder_rows(self.trace, left, computed, chunk, pad)
        if rows:
            self.count("admission padded with placeholder drafts")
            for name in (where, "under asynchronous scheduling"
                         if self.trace.async_scheduling else None):
                if name:
                    self.count(f"admission padded {name}")
            if (computed + 1) % self.trace.block_size == 0:
                self.count("placeholder drafts past a block's end")
        return rows

    def _allocation(self, rid, request, new, hit, hit_blocks, resumed=False, placeholders=0):
        """allocate_slots on both sides; on success, that it consumed what its check counted,
        and the request's progress recorded on both sides. `resumed`: the first allocation of
        a waiting request whose KV load is done (the watermark holds, no lookup).
        `placeholders`: the padded draft rows among the `new` tokens, past the request's own:
        they get slots, are never cached (the cache stops at the request's tokens), and are
        rejected when the step's output is processed, so the request counts the rest
        computed."""
        model, trace = self.model, self.trace
        before = (yield Call("", "num_free", oracle=None, compare=state_read)).actual
        admission = hit_blocks is not None
        # The scheduler passes its full_sequence_must_fit to every allocation of a waiting
        # request: an admission, and the first one after its KV load (no lookup then).
        whole = (admission or resumed) and trace.full_sequence_must_fit
        others = any(r.status == RUNNING for other, r in self.requests.items() if other != rid)
        in_flight = request.in_flight if trace.async_scheduling and not admission else 0
        # (a resumption's tokens in flight: a streaming stop's step, given only where some are)
        args = (rid, new, others, whole, *((in_flight,) if in_flight else ())) if resumed else \
            (rid, new, hit, admission, whole, others, in_flight)
        method = "resume" if resumed else "allocate_slots"
        try:
            expected = model.allocate_slots(rid, self._hashes(request), len(request.tokens),
                                            request.computed, new, hit, hit_blocks, whole,
                                            request.prompt, request.boundary, others,
                                            request.tokens, in_flight,
                                            waiting=True if resumed else None)
        except NothingToAllocate as refused:  # the manager must raise: nothing changes
            self.count("allocate_slots of nothing refused")

            def refuse():
                raise refused
            yield Call("", method, args, oracle=refuse, compare=self._allocation_compare)
            return []
        self._count_marks()
        if new == 0:
            self.count("allocate_slots of a hit alone")
        if model.freed_by_window:
            self.count("window frees blocks" if not in_flight else
                       "window frees blocks with tokens in flight")
        self.count("allocate_slots ok" if expected is not None else
                   "allocate_slots refused: the whole request does not fit"
                   if model.refused_whole else "allocate_slots refused")
        # (a refused allocation's preemptions so far: a chunk made `again` needs one since)
        request.refused = None if expected is not None else self.preemptions
        yield Call("", method, args, oracle=lambda: expected, compare=self._allocation_compare)
        if expected is None:
            return []
        after = (yield Call("", "num_free", oracle=None, compare=state_read)).actual
        consumed = before + model.freed_by_window - after
        if consumed != model.predicted:
            return [("invariant", f"allocate_slots consumed {consumed} free blocks, its check "
                                  f"counted {model.predicted}")]
        request.computed += hit + new - placeholders  # the drafts' rollback, at the output
        request.status = RUNNING
        self.flown(request, new - placeholders)  # (async_ops.py)
        request.streamed = False
        yield Call("", "set_computed", (rid, request.computed, RUNNING), oracle=None)
        if admission and trace.stats and NO_RECORD not in self.unread:
            # the scheduler records an admission that was made
            self.count("stats recorded")
            yield Call("", "record_stats", (rid, hit), oracle=lambda: model.
                       record_prefix_cache_stats(len(request.tokens), hit, request.preempted,
                                                 request.skip))
        return []

    def _count_marks(self) -> None:
        for mark in self.model.take_marks():
            self.count(mark)

    def _allocation_compare(self, expected, rejected, actual, raised):
        model = self.model
        if rejected is not None:
            return [] if raised is not None else [
                ("rejection", f"allocate_slots: expected the call refused ({rejected}), "
                              f"actual {short(actual)}")]
        if raised is not None:
            return crash_problems(raised)
        if expected is None:
            return [] if actual is None else [
                ("None vs success", f"expected None ({model.predicted} blocks needed, "
                                    f"{model.pool.num_free()} free), actual {short(actual)}")]
        if actual is None:
            return [("None vs success", f"expected {short(expected)} ({model.predicted} blocks "
                                        f"needed, {model.pool.num_free() + model.predicted} "
                                        f"free), actual None")]
        if actual != expected:
            return [("result", f"allocate_slots: new blocks per group: expected "
                               f"{short(expected)}, actual {short(actual)}")]
        return []

    def _hit_compare(self, expected, rejected, actual, raised) -> list:
        """The lookup's answer against the model's; without the boundary where the release
        returns none (vLLM 0.25: the driver reads it as 0)."""
        if NO_BOUNDARY in self.unread and raised is None:
            expected = (*expected[:2], boundary_of(actual, expected[2]))
        return hit_compare(expected, rejected, actual, raised)
