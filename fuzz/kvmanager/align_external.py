"""A KV connector's external tokens beside a Mamba "align" group, judged in the reduced mode
(`align.py`; the "mamba connector" profile, `strategies/kvmanager/mamba_connector.py`). A mixin
of `AlignLockstep`: its `connect` and `loaded` handle the connector ops of an "align" trace
(any other trace goes to `connector.py`'s), its `_resume` a loaded request's first step.

The driver's calls as vLLM 0.33.0's scheduler makes them (`Scheduler.schedule`, the waiting
branch; `_update_waiting_for_remote_kv`): the connector's lookup
(`get_computed_blocks_for_connector`, judged exactly: `align_connector.py`); the local hit
presented to the connector aligned down to the block (`block_aligned_local`), the connector's
tokens counted from there; where the hit ends inside a block and the connector holds more than
that partial tail, the tail dropped (`truncate_computed_blocks`) and the load taken (where the
caller's cap then drops it, the cut hit admitted: `align_tail_drop.py`), else the
tail kept and nothing loaded; a diverged hit (full attention deeper than the Mamba group's
state) with no external tokens reconciled by `get_computed_blocks` (the plain admission,
`align.py`); then `allocate_slots` with `num_external_computed_tokens` (an asynchronous load:
no new tokens, caching delayed, `reserved_blocks`, `skip_zeroing_group_ids` the groups it
writes). A load reported done caches the request's blocks (`cache_blocks`), the last token of
a prompt loaded whole computed again; a failed one (with two groups always the request's
whole: `failed_recving`) frees it. A loaded request's next step is an admission with no lookup
(`resume`). Under asynchronous scheduling (`vllm_workloads.MAMBA_ASYNC_CONNECTOR`) that step
is in flight as any step (`_flying`; `align_async.py`); a load's admission and its report carry
none (the request waits). A one-token prompt loaded whole: `align_external_single.py`.

What the worker and the scheduler rely on, checked after each admission with external tokens
(read from the implementation; `external_problems`), and of the lookup's blocks
(`_lookup_block_problems`: full attention's whole ones cached under the request's hashes):
- full attention's table covers cdiv(hit + external, b) blocks, exactly so after a load (no
  slots past them), its blocks past the hit the request's own (not null, held by no other
  live request, not the hit's);
- the Mamba group's external part is nulls but the block of the last external token's state,
  a block of its own (the only state the worker fills: `allocate_external_computed_blocks`
  with `get_num_skipped_tokens` = c - 1 takes one block, at (c - 1) // b), after a load the
  table exactly cdiv(c, b) long plus its speculative blocks;
- after a load's admission none of its blocks past the hit cached (caching is delayed: a
  block that is, was adopted with a cache entry, the worker's load then writing a block
  other requests read);
- the zeroing records (`take_new_block_ids`, Mamba layers turn zeroing on): full attention's
  external blocks unless the load writes that group, then the blocks the step allocated;
- while the load is in flight and after it, the Mamba table keeps the rule of
  `oracle/kvmanager/mamba_align.py` as if the load were a step to its last token (the kept
  state is the loaded one); when the request resumes, the state its step reads (block
  (c - 1) // b) is the loaded block, unchanged.
- the finish's `remove_skipped_blocks` (the scheduler's, before the connector's
  `request_finished`; the profile makes one before each finish): exactly the Mamba states
  below (p - 1) // b freed (`remove_skipped`).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles, short
from kvfuzz.fuzz.kvmanager import align_connector
from kvfuzz.fuzz.kvmanager.align_external_pad import (EVENTS as PADDED, PADDED_ADMISSION,
                                                      RESUMED, AlignResumeLoaded)
from kvfuzz.fuzz.kvmanager.align_external_single import EVENTS as SINGLE
from kvfuzz.fuzz.kvmanager.align_refusal import needless_admission_refusal
from kvfuzz.fuzz.kvmanager.align_result import \
    allocation_problems as _allocation_problems
from kvfuzz.fuzz.kvmanager.align_tail_drop import EVENTS as TAIL_DROP, AlignTailDrop
from kvfuzz.fuzz.kvmanager.connector import LOADING
from kvfuzz.fuzz.kvmanager.connector_cap import cap_text, capped_args, lookup_cap
from kvfuzz.fuzz.kvmanager.flight_finish import processed_at_finish, skipped_at
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING, WAITING, state_read
from kvfuzz.oracle.kvmanager import mamba_align
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.strategies.kvmanager.connector_ops import EVERY_GROUP, Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import RemoveSkipped, Schedule

SYNC = "Mamba connector: external tokens loaded with the step"
LOAD = "Mamba connector: an asynchronous load"
DROPPED = "Mamba connector: a partial local hit dropped for external tokens"
KEPT = "Mamba connector: a partial local hit kept, nothing loaded"
LAGGING = "Mamba connector: external tokens past a lagging Mamba state"
RECONCILED = "Mamba connector: a diverged hit reconciled, nothing loaded"
SOME = "Mamba connector: a load writing some groups only"
REFUSED = "Mamba connector: admission with external tokens refused"
DONE = "Mamba connector: load done"
FAILED = "Mamba connector: load failed (freed)"
WHOLE = "Mamba connector: a whole prompt loaded, its last token recomputed"
SKIPPED = "Mamba connector: the finish's remove_skipped_blocks"
SKIPPED_FREED = "Mamba connector: the finish's remove_skipped_blocks freed states"
EVENTS = (SYNC, LOAD, DROPPED, KEPT, LAGGING, RECONCILED, SOME, REFUSED, DONE, FAILED, WHOLE,
          RESUMED, SKIPPED, SKIPPED_FREED, *SINGLE, *PADDED, *TAIL_DROP)


class AlignExternal(AlignTailDrop, AlignResumeLoaded):
    """Mixed into `AlignLockstep` (before the plain lock step, whose handlers it overrides)."""

    @handles(Connect)
    def connect(self, op: Connect):
        if not self.align:
            return (yield from super().connect(op))
        request, trace = self.requests.get(op.rid), self.trace
        if request is None or request.status != WAITING or request.computed:
            return
        if self.single_relooked(op.rid, request):  # (a one-token prompt loaded whole)
            return (yield from self.relooked_connect(op, request))
        rid, tokens, size = op.rid, request.tokens, trace.block_size
        request.cap = cap = lookup_cap(op.max_hit, len(tokens))  # the caller's (-1: none)
        expected = align_connector.request_expectation(trace, self.cache, request, cap=cap)
        self.count(expected[0])
        self.count_capped(request, expected)  # (`align_hits.py`)
        got = yield Call(f"get_computed_blocks_for_connector(r{rid}{cap_text(cap)})",
                         "connector_lookup", capped_args(rid, cap), oracle=None,
                         compare=lambda e, r, actual, raised:
                         align_connector.lookup_problems(expected, actual, raised) or
                         self._lookup_block_problems(request, actual))
        self.hit_blocks, local, boundary, diverged = got.actual  # (`align_count.py`)
        # the connector counts its tokens past the block-aligned local hit: all the request's
        # for a load, all but the last for a synchronous one
        partial = local % size
        room = len(tokens) - (local - partial) - (0 if op.load else 1)
        held = 0 if request.skip else max(0, min(op.external, room))
        dropped, held = self.capped_at_partial(cap, local, partial, held, size)
        if dropped:
            self.count(DROPPED)
            local -= partial
            self.hit_blocks = tuple(blocks[:local // size] for blocks in self.hit_blocks)
            yield Call(f"truncate_computed_blocks(r{rid}'s hit, {local})", "truncate_hit",
                       (rid, local), oracle=None, compare=state_read)
        elif partial and op.external:  # (the tail kept, nothing loaded)
            self.count(KEPT)
        # Nothing loaded: a plain admission, whose `get_computed_blocks` reconciles a diverged
        # hit (the scheduler calls it then only; elsewhere its answer is the lookup's: both
        # groups as deep, or the lookup's own fallback to it)
        if not held:
            if diverged:
                self.count(RECONCILED)
            elif dropped:  # the truncated hit kept, the cap's drop after it (`align_tail_drop`)
                return (yield from self.truncated_admission(op, request, local, boundary))
            self.looked_up = True
            if op.pad:  # (the padding of a readmission or a prompt met again: `..._pad.py`)
                self.count(PADDED_ADMISSION)
            return (yield from self.schedule(Schedule(rid, op.chunk, op.pad,
                                                      rows_in_flight=op.rows_in_flight,
                                                      max_hit=op.max_hit)))
        if diverged:
            self.count(LAGGING)
        request.boundary = boundary
        return (yield from self._admit_external(op, request, local, held))

    def connector_lookup_problems(self, rid: int, actual,
                                  max_hit: int = -1) -> list[tuple[str, str]]:
        """A live scheduler's connector lookup, checked when it is made (`guard.py`, beside a
        Mamba group: `guard_mamba_connector.py`), as `connect` checks it, under the caller's
        `max_hit` (-1: none)."""
        request, trace = self.requests[rid], self.trace
        request.cap = lookup_cap(max_hit, len(request.tokens))
        expected = align_connector.request_expectation(trace, self.cache, request,
                                                       cap=request.cap)
        problems = align_connector.lookup_problems(expected, actual, None) or \
            self._lookup_block_problems(request, actual)
        if problems:
            self.log.append(f"get_computed_blocks_for_connector(r{rid}{cap_text(request.cap)})"
                            f" -> {short(actual, 60)}")
        return problems

    def _lookup_block_problems(self, request, actual) -> list[tuple[str, str]]:
        """The connector lookup's blocks (its hit judged by `align_connector`): full
        attention's cdiv(hit, b), each whole one cached under the request's hash of it (the
        pool's entries before the lookup); the Mamba group's nulls but its last."""
        try:
            (full, mamba), hit = actual[0], actual[1]
        except (TypeError, ValueError):
            return [("prefix hit", f"get_computed_blocks_for_connector: expected two groups' "
                                   f"blocks, actual {short(actual)}")]
        size, hashed = self.trace.block_size, self.trace.hash_size
        if len(full) != cdiv(hit, size) or mamba and (not mamba[-1] or any(mamba[:-1])):
            return [("prefix hit", f"get_computed_blocks_for_connector: a hit of {hit} tokens "
                                   f"in blocks of {size}, blocks {short(actual[0])}: expected "
                                   f"{cdiv(hit, size)} of full attention's, the Mamba group's "
                                   f"nulls then its state")]
        units = request.hashes(hashed, self.trace.hash_lookahead)
        for index, block in enumerate(full[:hit // size]):
            if (units[(index + 1) * size // hashed - 1], 0) not in self._entries(block):
                return [("prefix hit", f"get_computed_blocks_for_connector: full attention's "
                                       f"block {index}, block {block}, is not cached under the "
                                       f"request's hash of it")]
        return []

    def _admit_external(self, op: Connect, request, local: int, external: int):
        rid, trace, size = op.rid, self.trace, self.trace.block_size
        total, load = local + external, op.load
        new = 0 if load else self._chunk(request, total,
                                         min(op.chunk, len(request.tokens) - total))
        written = {0, 1} if op.written == EVERY_GROUP else \
            {g for g in (0, 1) if op.written >> g & 1}
        self.count(LOAD if load else SYNC)
        args = (rid, new, local, external, load, op.reserve if load else 0,
                trace.full_sequence_must_fit,
                any(r.status == RUNNING for other, r in self.requests.items() if other != rid))
        if load and written != {0, 1}:
            self.count(SOME)
            args += (tuple(sorted(written)),)
        self.read("take_new_block_ids")  # drained every step, as the scheduler's worker does
        got = yield Call(f"allocate_slots(r{rid}, {new}, hit {local}, external {external}"
                         f"{', delayed caching' if load else ''}"
                         f"{f', {op.reserve} reserved' if load and op.reserve else ''})",
                         "connect", args, oracle=None, compare=_allocation_problems)
        counted = self._count_problems(rid, request, got.actual is not None, new, args[7],
                                       hit=local, external=external, reserved=args[5],
                                       lookahead=not load)
        if got.actual is None:
            self.count(REFUSED)
            free = sum(1 for count in self.ref[1:] if count == 0) - args[5]
            wrong = needless_admission_refusal(
                size, max(len(request.tokens), total + new), trace.lookahead,
                trace.mamba_speculative, int(trace.watermark * trace.blocks), free)
            return counted + ([("refusal", wrong)] if wrong else [])
        tables = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        zeroed = self.read("take_new_block_ids")
        problems = counted + self.external_problems(rid, tables, local, total, new, load,
                                                    got.actual, zeroed,
                                                    0 not in written or not load)
        self.read_from[rid], self.cached_upto[rid] = total, local
        request.computed = total + new
        self.loaded_state[rid] = tables[1][(total - 1) // size] if len(tables) == 2 and \
            len(tables[1]) > (total - 1) // size else None
        if load:
            self.loaded_end[rid] = total
            self.checkpoints.pop(rid, None)
            request.status = LOADING
        else:
            self._checkpoint(rid, request)
            self._flying(rid, request)
            request.status, self.stepped = RUNNING, rid
        yield Call("", "set_computed", (rid, request.computed, request.status), oracle=None)
        return problems

    def external_problems(self, rid, tables, local, total, new, load, fresh, zeroed,
                          zero_full) -> list[tuple[str, str]]:
        """The contract of external tokens beside a Mamba group (the module's docstring)."""
        size, spec = self.trace.block_size, self.trace.mamba_speculative
        if len(tables) != 2:
            return [("external blocks", f"r{rid}: expected two groups' tables, actual "
                                        f"{short(tables)}")]
        full, mamba = tables
        first, end, last = cdiv(local, size), cdiv(total, size), (total - 1) // size
        others = {b for other in self.requests if other != rid
                  for group in self.read("block_ids", other) for b in group if b}
        ours = full[first:end]
        if len(full) < end or load and len(full) != end:
            return [("external blocks", f"r{rid} full attention: {len(full)} blocks after "
                                        f"{total} computed tokens ({total - local} external), "
                                        f"expected {end}")]
        shared = [b for b in ours if not b or b in others or b in full[:first]]
        if shared:
            return [("external blocks", f"r{rid} full attention: blocks {short(ours)} for its "
                                        f"external tokens; {short(shared)} null, held by "
                                        f"another request or adopted from the hit")]
        keys = self.read("keys")  # (a load delays caching: none of its blocks is cached yet)
        cached = [b for b in ours + mamba[first:] if load and b and keys[b] is not None]
        if cached:
            return [("cached before the load", f"r{rid}'s load is in flight; its blocks "
                                               f"{short(cached)} past the hit already cached")]
        if load and len(mamba) != end + spec:
            return [("external blocks", f"r{rid}'s Mamba table {short(mamba)} after a load to "
                                        f"{total} tokens: expected {end + spec} blocks")]
        part = mamba[first:last + 1]
        state = part[-1] if len(part) == last + 1 - first else 0
        if any(part[:-1]) or not state or state in others or \
                (len(mamba) > last and state in mamba[:first]):
            return [("external blocks", f"r{rid}'s Mamba table {short(mamba)}: positions "
                                        f"{first} to {last} (its {total - local} external "
                                        f"tokens) expected nulls but a block of its own at "
                                        f"{last}, the state of token {total - 1}")]
        expected = (ours if zero_full else []) + list(fresh[0] if fresh else [])
        if sorted(zeroed) != sorted(expected):
            return [("zeroing", f"take_new_block_ids after r{rid}'s admission with external "
                                f"tokens: expected {short(sorted(expected))} (full attention's "
                                f"{'external and ' if zero_full else ''}new blocks), actual "
                                f"{short(sorted(zeroed))}")]
        return []

    @handles(Loaded)
    def loaded(self, op: Loaded):
        if not self.align:
            return (yield from super().loaded(op))
        request = self.requests.get(op.rid)
        if request is None or request.status != LOADING:
            return
        rid = op.rid
        if op.valid >= 0:  # failed: the request's whole (`failed_recving`), freed
            self.count(FAILED)
            yield Call(f"free(r{rid}): its load failed", "free", (rid, False), oracle=None,
                       compare=state_read)
            self._forget(rid)
            request.computed, request.status = 0, WAITING
            yield Call("", "set_computed", (rid, 0, WAITING), oracle=None)
            return
        self.count(DONE)
        computed = request.computed
        yield Call(f"cache_blocks(r{rid}, {computed})", "cache_blocks", (rid, computed),
                   oracle=None, compare=state_read)
        if computed == len(request.tokens):  # the last token is computed again for its logits
            self.count(WHOLE)
            request.computed -= 1
        request.status, self.stepped = WAITING, rid  # (its partial tail judged as a step's)
        yield Call("", "set_computed", (rid, request.computed, WAITING), oracle=None)

    @handles(RemoveSkipped)
    def remove_skipped(self, op: RemoveSkipped):
        """The scheduler's `remove_skipped_blocks(request, computed - in flight)` before a
        connector's `request_finished` (`_connector_finished`; in flight: an abort's, up to two
        steps, `flight_finish.py`). `MambaManager.remove_skipped_blocks` frees the
        states before the one of its last processed token, as a step does first
        (`mamba_align.py`: every block below (p - 1) // b, null in its place): exactly those
        nulled, every other position of both tables as it was (full attention skips none); the
        freed blocks back in the pool (the after-op checks), and from here the table kept as
        after a step from p to p (none of its last step's read state or checkpoint)."""
        if not self.align:
            return (yield from super().remove_skipped(op))
        request = self.requests.get(op.rid)
        if request is None:
            return
        rid, processed = op.rid, processed_at_finish(self, op, request)  # (flight_finish.py)
        self.count(SKIPPED)
        before = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        yield Call(f"remove_skipped_blocks(r{rid}, {processed})", "remove_skipped_blocks",
                   (rid, processed), oracle=None, compare=state_read)
        after = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        skipped = max(0, (processed - 1) // self.trace.block_size)
        expected = [list(before[0])] + [[0 if i < skipped else b for i, b in enumerate(table)]
                                        for table in before[1:]]
        if [list(table) for table in after] != expected:
            return [("remove_skipped", f"remove_skipped_blocks(r{rid}, {processed}) in blocks of "
                                       f"{self.trace.block_size}: tables {short(before)} became "
                                       f"{short(after)}, expected {short(expected)} (the Mamba "
                                       f"states below position {skipped} freed, nothing else)")]
        if expected != [list(table) for table in before]:
            self.count(SKIPPED_FREED)
        if request.status == RUNNING and rid not in self.loaded_end:
            skipped_at(self, rid, request, processed)  # (`flight_finish.py`)
        return []

    def _flying(self, rid, request) -> None:
        """A synchronous load's admission step, or a loaded request's first step: in flight
        under asynchronous scheduling as any step (`align_async.flights_allocated`: the
        engine's next allocation of it passes its tokens)."""
        self.flights_allocated(rid, request, 0)

    def as_loaded(self, rid, request):
        """`request` as the boundary hand-offs judge it: a loaded one at its loaded end (a
        whole prompt's last token, counted back for its recompute, is loaded)."""
        end = self.loaded_end.get(rid)
        return request if end is None or request is None else _Loaded(request, end)

    def _forget(self, rid: int) -> None:
        for kept in (self.loaded_end, self.loaded_state, self.read_from, self.checkpoints,
                     self.tails, self.cached_upto):
            kept.pop(rid, None)
        self.pending_copy.discard(rid)  # (`align_count.py`)

    def _kept_problems(self, rid, request, tables) -> list[tuple[str, str]]:
        """A request whose load is in flight or done keeps the states of a step to its last
        loaded token (`mamba_align.table_problems` from and to it); any other as `align_pool`
        judges it."""
        end = self.loaded_end.get(rid)
        if end is None or len(tables) != 2:
            return super()._kept_problems(rid, request, tables)
        wrong = mamba_align.table_problems(tables[1], end, end, self.trace.block_size, None,
                                           self.trace.mamba_speculative)
        return [("mamba states", f"r{rid}'s Mamba table {wrong} (loaded to {end} tokens)")] \
            if wrong else []


class _Loaded:
    """A request seen with its loaded tokens computed (`as_loaded`)."""

    def __init__(self, request, end: int):
        self.request, self.computed = request, end

    def __getattr__(self, name):
        return getattr(self.request, name)
