"""`kvfuzz.guard` and `kvfuzz.record` of a live vLLM `KVCacheManager`: the object an engine's
scheduler calls, wrapped so that each of its calls becomes an op of a `kvmanager` trace
(`strategies/kvmanager/trace.py`) as it happens, and, guarding, is checked in lock step with
the oracle (`fuzz/engine/guard.py`).

The scheduler's calls map onto the trace's ops as the trace's own docs describe them:
- `get_computed_blocks(request)` of a request not seen before: `arrive` (its prompt), then the
  lookup itself, a read, done at once and kept for the allocation that follows it; its
  `max_cache_hit_length` (vLLM's scheduler passes one with auxiliary outputs on) is the
  admission's `max_hit` (`guard_steps.py`);
- `allocate_slots(request, n, hit, hit blocks, ...)` of a waiting request: `schedule(rid, n)`
  (its lookup and the admission); of a running one whose tokens are all computed and which has
  one token more than the guard last saw: `decode(rid, token)`; of a running one with tokens
  left: `schedule(rid, n)` (`guard_steps.py`);
- `free(request)`: `finish` when the request has finished, `preempt` when it was running
  (after a `sample` of the token it sampled and never asked a slot for, if any);
  `pop_blocks_for_free(request)` (a free the scheduler defers past a step in flight): the same
  with `defer`, and the scheduler's `block_pool.free_blocks(reversed(blocks))` of what it
  returned (through the manager's `block_pool`, once that step is processed): `release`;
- `evict_blocks(ids)`: `evict`; `reset_prefix_cache()`: `reset`;
- a KV connector's calls (`get_computed_blocks_for_connector`, admissions with external tokens,
  asynchronous loads, `cache_blocks` of a load done, the allocation that resumes it):
  `connect`, `loaded` and `schedule` (`guard_connector.py`);
- zeroing (mixed precision): `take_new_block_ids()` (the scheduler's drain every step) and a
  failed load's `record_blocks_for_zeroing`, checked against the oracle's records and part of
  no op of their own (`guard_zeroing.py`).
- speculative decoding: its settings read from the manager (`guard_header.speculation`), the
  draft slots of every allocation given to the guard (`num_lookahead_tokens`), and the
  scheduler's `cache_blocks(request, computed)` after an output with draft tokens: `settle`
  (after a `sample` of the token it appended); the synchronous scheduler's step of a request's
  last token and its drafts: `schedule` with `drafts`, its output's tokens `sample`s and its
  rejected drafts the `settle`'s `rejected` (`guard_sync_drafts.py`); an admission padded with placeholder drafts
  (`pad_spec_decode`): a `schedule` with `pad` (`padding.py`), under a connector a `connect`
  with `pad`, after a KV load the resumption's `schedule` with `pad` (`guard_connector.py`).
- resumable (streaming-input) requests: a stop that keeps the request's blocks, and each
  streaming update it takes, found by the request's status before each modelled call: a
  `stream` (`guard_streaming.py`); its next allocation is the resumption's `schedule`.
Every other method that changes the manager is refused (`GuardUnsupported`), reads go
through. What the trace does not model is refused before the call is made, with the reason:
draft slots other than the guard was given, encoder tokens, multimodal inputs, requests that
skip the prefix cache, a second group other than one sliding window or one Mamba group in
mode "align" (`guard_mamba.py`: its admissions deferred a step are no op), a hash block size other
than the block size, a manager already used before it was guarded, and a scheduler whose
request state is not the one the trace's ops lead to (e.g. asynchronous scheduling's in-flight
tokens). A prompt given as embeddings (`prompt_embeds`, no token ids) arrives with
`embeds`, its tokens the embedding values, where each position's embedding is one integral
float32 value (else refused). A request's LoRA
adapter (its name and path) and cache salt go into its `arrive` (`Arrive.keys`), as strings of
at most `codec.MAX_KEY` characters (else refused); its images are refused (vLLM's scheduler
builds none without a multimodal model, which the CPU sessions here do not load).
"""

from __future__ import annotations

import inspect

from kvfuzz.fuzz.engine.guard import GuardedObject, Session, modelled, open_session
from kvfuzz.fuzz.kvmanager.guard_async import AsyncCalls
from kvfuzz.fuzz.kvmanager.guard_connector import CONNECTOR_ARGS, ConnectorCalls
from kvfuzz.fuzz.kvmanager.guard_deferred import DeferredFrees
from kvfuzz.fuzz.kvmanager.guard_header import header
from kvfuzz.fuzz.kvmanager.guard_mamba import CopyRetentions, SameStepDeferral
from kvfuzz.fuzz.kvmanager.guard_mamba_connector import MambaConnectorCalls
from kvfuzz.fuzz.kvmanager.guard_steps import AllocationMapping
from kvfuzz.fuzz.kvmanager.guard_streaming import StreamingCalls
from kvfuzz.fuzz.kvmanager.guard_sync_drafts import SyncDraftCalls
from kvfuzz.fuzz.kvmanager.guard_tracked import MAX_TOKEN, RequestTracking
from kvfuzz.fuzz.kvmanager.guard_zeroing import ZeroingCalls
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Evict, Finish, Preempt, Reset, Settle

# What the scheduler reads (or drains: events, stats, ids to zero), which changes no block.
READS = frozenset({
    "usage", "get_block_ids", "get_blocks", "get_num_common_prefix_blocks", "take_events",
    "make_prefix_cache_stats", "record_prefix_cache_stats", "prefix_cache_lookup_enabled",
    "create_kv_cache_blocks", "new_step_starts",
    "get_block_ids_for_computed_tokens", "take_kv_cache_block_copies",
    "take_boundary_state_offloads", "estimate_cached_tokens", "truncate_computed_blocks"})
# allocate_slots' arguments the trace has no field for, and the value each must have (a
# connector's, CONNECTOR_ARGS, are modelled at a connector admission alone).
UNMODELLED = {"num_encoder_tokens": 0}
# Where vLLM builds the manager (`kvfuzz guard kvmanager -- COMMAND`: fuzz/engine/autoguard/).
SITES = ("vllm.v1.core.sched.scheduler:KVCacheManager",)


def guard(manager, *, check: bool = True, impl=None, corpus="corpus",
          on_unsupported: str = "raise", max_in_flight_tokens: int | None = None,
          num_lookahead_tokens: int = 0, async_scheduling: bool | None = None,
          steps_in_flight: int = 1):
    """The live `manager`, wrapped: checked in lock step with the oracle (`check`), or only
    recorded. `impl` names it in reports (default: its class's catalogue entry). A call the
    trace cannot model raises `GuardUnsupported` (`on_unsupported="raise"`), or, with "stop",
    is said once on stderr and goes through, and so does every call after it, unchecked.
    `num_lookahead_tokens`: the draft tokens' slots the scheduler asks on every allocation
    (its own `num_lookahead_tokens`; an allocation with another number is refused).
    `async_scheduling`: the scheduler is vLLM's `AsyncScheduler` (True) or a synchronous one
    (False: a request with tokens in flight is refused); None infers it at the first tokens in
    flight (`guard_async.py`). `steps_in_flight`: under a pipeline (vLLM's V2 model runner over
    n stages), the steps of a request that may be in flight at its next allocation, n (the
    engine's `max_concurrent_batches` less one); more than one implies `async_scheduling`."""
    if steps_in_flight > 1 and async_scheduling is None:
        async_scheduling = True
    trace = header(manager, max_in_flight_tokens, num_lookahead_tokens, bool(async_scheduling),
                   steps_in_flight)
    driver = None
    if check:
        from kvfuzz.impl.kvmanager.live import LiveManagerDriver

        driver = LiveManagerDriver(manager, trace.blocks)
    session = open_session("kvmanager", manager, trace, driver, impl, corpus, on_unsupported)
    if driver is not None:
        # (per hash block: the block, or fewer tokens beside a Mamba "align" group)
        driver.model_hashes = lambda rid: session.lock.requests[rid].hashes(
            trace.hash_size, trace.hash_lookahead)
        if session.lock is not None:  # the scheduler takes the zeroing records itself
            session.lock.zeroing_read_only = True
            session.lock.live_session = True  # (an engine's steps span several ops)
    guarded = GuardedManager(manager, session, driver)
    vars(guarded)["_kvfuzz_infer_async"] = async_scheduling is None
    return guarded


class GuardedManager(RequestTracking, AllocationMapping, StreamingCalls, SyncDraftCalls,
                     AsyncCalls, ZeroingCalls, DeferredFrees, ConnectorCalls, SameStepDeferral,
                     CopyRetentions, MambaConnectorCalls, GuardedObject):
    """Stands for the manager: the scheduler's calls go through `kvfuzz_session` (the trace so
    far: `.trace()`, `.save(directory)`; `.divergence` once one was raised)."""

    TARGET, READS = "kvmanager", READS

    def __init__(self, manager, session: Session, driver):
        super().__init__(manager, session, driver)
        state = vars(self)
        state["_kvfuzz_requests"]: dict = {}   # request_id -> _Tracked, while the request lives
        state["_kvfuzz_lookups"]: dict = {}    # rid -> (the lookup's blocks object, hit tokens,
                                               # whether the connector's, the caller's cap)
        state["_kvfuzz_next_rid"] = 0
        state["_kvfuzz_deferred"]: list = []   # (rid, blocks popped), until the pool frees them
                                               # (guard_deferred.py)
        state["_kvfuzz_whole"] = None          # full_sequence_must_fit of the admissions
        # allocate_slots' parameters, read once: the installed version's names and defaults
        state["_kvfuzz_signature"] = inspect.signature(manager.allocate_slots)

    # -- the calls the trace models -----------------------------------------------------------
    @modelled
    def get_computed_blocks(self, request, max_cache_hit_length=None):
        return self._lookup("get_computed_blocks", request, max_cache_hit_length)

    def _lookup(self, method: str, request, max_cache_hit_length):
        """A lookup (`method`: `get_computed_blocks`, or a connector's
        `get_computed_blocks_for_connector`, which also says whether the hit diverged), kept
        for the admission that follows it and checked at once."""
        manager, session = self._kvfuzz_object, self.kvfuzz_session
        self._streams()
        tracked = self._request(request, arriving=True)
        if tracked.running or tracked.loading or request.num_computed_tokens != 0:
            self._refuse(f"{method} of request {request.request_id!r}, which the trace has "
                         f"running (or with computed tokens)")
        self._stale(tracked, request)  # asynchronous scheduling's stale output
        tracked.hashes = None  # (made again before the lookup under lookahead hashing)
        self._same_tokens(request, tracked)
        connector = method != "get_computed_blocks"
        cap = self._caller_cap(method, tracked, max_cache_hit_length)  # (its tokens known)
        vars(self)["_kvfuzz_made"] = True
        result = getattr(manager, method)(request, max_cache_hit_length)
        blocks, hit, boundary, *diverged = result
        self._kvfuzz_lookups.clear()
        self._kvfuzz_lookups[tracked.rid] = (blocks, int(hit), connector, cap)
        if self._kvfuzz_driver is not None:
            from kvfuzz.impl.kvmanager.reads import _ids

            plain = (_ids(blocks), int(hit), int(boundary))
            self._kvfuzz_driver.lookups = {tracked.rid: (*plain, *map(bool, diverged))}
            self._kvfuzz_driver.hits = {tracked.rid: blocks}
            # Checked now: the scheduler may allocate nothing after it. A wrong hit is the
            # lookup of a `schedule` (or `connect`) op, as a replay of the saved trace makes it.
            if connector and self._beside_mamba():  # (guard_mamba_connector.py)
                problems = self._connector_lookup_problems(tracked.rid, blocks, hit, boundary,
                                                           diverged[0], cap)
            else:
                problems = session.lock.lookup_problems(tracked.rid, plain, cap)
            if connector and not self._beside_mamba():
                problems = problems or self._diverged_problems(bool(diverged[0]))
            if problems:
                session.report(self._lookup_op(tracked.rid, connector, cap), problems)
        return result

    @modelled
    def allocate_slots(self, request, num_new_tokens, *args, **kwargs):
        manager = self._kvfuzz_object
        self._streams()
        bound = self._kvfuzz_signature.bind(request, num_new_tokens, *args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        for name, value in UNMODELLED.items():
            if name in given and given[name] not in (value, None, [], ()):
                self._refuse(f"allocate_slots with {name}={given[name]!r}")
        # (an asynchronous KV load's admission asks no draft slots: they come with its resumption)
        lookahead = 0 if given.get("delay_cache_blocks") else self.kvfuzz_session.header.lookahead
        if int(given.get("num_lookahead_tokens") or 0) != lookahead:
            self._refuse(f"allocate_slots where the guard was given {lookahead} draft slots "
                         f"(kvfuzz.guard(..., num_lookahead_tokens=)), with "
                         f"num_lookahead_tokens={given.get('num_lookahead_tokens')!r}")
        tracked = self._request(request)
        self._in_flight(tracked, request)
        self._sync_load_failed(tracked, request)
        if request.num_computed_tokens != tracked.computed or tracked.loading:
            self._refuse(f"request {request.request_id!r} has {request.num_computed_tokens} "
                         f"computed tokens where the trace has {tracked.computed}"
                         f"{' (its KV load in flight)' if tracked.loading else ''}")
        n = int(num_new_tokens)
        lookup = self._kvfuzz_lookups.pop(tracked.rid, None)
        self._kvfuzz_lookups.clear()
        if lookup and self._same_step_deferral(tracked, given, lambda: manager.allocate_slots(
                *bound.args, **bound.kwargs)):  # (a Mamba group's: guard_mamba.py)
            return None
        connector = {name: given.get(name, value) for name, value in CONNECTOR_ARGS.items()}
        if lookup is None or not (lookup[2] or connector["num_external_computed_tokens"] or
                                  connector["delay_cache_blocks"]):
            self._no_connector_args(connector)
        # the lock step's driver method that makes the call: by what the call is
        method = "allocate_slots"
        if tracked.running:
            op, expected, done = self._step(tracked, request, n, given)
        elif lookup is None and tracked.computed:  # its KV load done: no lookup
            op, expected, done = self._resumption(tracked, request, n, given)
            method = "resume"
        else:
            op, expected, done = self._admission(tracked, request, n, given, lookup, connector)
            method = self._connect_method(op) if isinstance(op, Connect) else method
        result = self._run(op, method, lambda: manager.allocate_slots(
            *bound.args, **bound.kwargs), expected)
        if result is not None:
            tracked.before = int(request.num_computed_tokens) + sum(
                int(given.get(name) or 0)
                for name in ("num_new_computed_tokens", "num_external_computed_tokens"))
            done()
            # (draft rows are no tokens, unless held in flight: asynchronous scheduling)
            pad = getattr(op, "pad", 0)
            self._flown(tracked, n - (0 if self._rows_in_flight(pad) else pad))
        return result

    @modelled
    def free(self, request):
        return self._free(request, defer=False)

    def _free(self, request, defer: bool):
        manager = self._kvfuzz_object
        method = "pop_blocks_for_free" if defer else "free"
        self._streams()
        tracked = self._kvfuzz_requests.get(request.request_id)
        if tracked is None:  # a request the manager never saw
            return getattr(manager, method)(request)
        self._kvfuzz_lookups.clear()
        if tracked.loading:  # its load failed, nothing valid (or it was aborted)
            if not defer:
                return self._failed_load(tracked, request)
            if not request.is_finished():  # the scheduler frees a failed load at once
                self._refuse(f"pop_blocks_for_free of request {request.request_id!r} during "
                             f"its KV load, not finished (a deferred failed load)")
            # aborted during its load while a step that wrote its blocks is in flight: a
            # `finish` with `defer`, below
        if request.is_finished():
            op = Finish(tracked.rid, defer)
        elif tracked.running:
            self._sampled(tracked, request)
            op = Preempt(tracked.rid, defer)
        else:
            self._refuse(f"{method} of request {request.request_id!r}, waiting and not finished")
        finished = isinstance(op, Finish)
        result = self._run(op, method, lambda: getattr(manager, method)(request),
                           lambda args: None if args[1] == finished else
                           f"the lock step frees {args}, the engine's request finished: {finished}")
        if defer and result:  # the scheduler keeps a non-empty list only
            self._kvfuzz_deferred.append((tracked.rid, list(result)))
        if finished:
            del self._kvfuzz_requests[request.request_id]
        else:
            tracked.computed, tracked.running, tracked.async_sync_end = 0, False, None
            tracked.ghost = tracked.owed = 0  # (a preemption clears the output placeholders)
            tracked.in_flight = 0  # (its stale output drained before its admission: as the
            # lock step has it; its next allocation's alone are then in flight)
        return result

    @modelled
    def evict_blocks(self, block_ids):
        manager, session = self._kvfuzz_object, self.kvfuzz_session
        ids = sorted(set(block_ids))
        if len(ids) > 1 << 10 or any(type(b) is not int or not 0 <= b <= MAX_TOKEN for b in ids):
            self._refuse(f"evict_blocks of {len(ids)} ids outside the trace's limits")
        self._kvfuzz_lookups.clear()
        blocks = session.header.blocks
        wanted = [b for b in ids if b < blocks]
        return self._run(Evict(tuple(ids)), "evict_blocks",
                         lambda: manager.evict_blocks(block_ids),
                         lambda args: None if list(args[0]) == wanted else
                         f"evict_blocks of {args[0]}, the engine's {wanted}")

    @modelled
    def reset_prefix_cache(self):
        manager = self._kvfuzz_object
        self._kvfuzz_lookups.clear()
        return self._run(Reset(), "reset_prefix_cache", manager.reset_prefix_cache)

    def _run_settle(self, tracked, request, n: int, rejected: int = 0):
        """`cache_blocks(request, n)` run as the trace's `settle` (either scheduler's), with
        the drafts the output `rejected` rolled back first (asynchronous scheduling)."""
        self._kvfuzz_lookups.clear()
        rid = tracked.rid
        return self._run(Settle(rid, rejected), "cache_blocks",
                         lambda: self._kvfuzz_object.cache_blocks(request, n),
                         lambda args: None if tuple(args) == (rid, n) else
                         f"the lock step caches {args}, the engine r{rid}'s {n} tokens")
