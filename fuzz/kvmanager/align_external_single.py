"""A one-token prompt loaded whole by a KV connector beside a Mamba "align" group, looked up
again (the reduced mode, `align_external.py`'s hooks; the "mamba connector" profile makes it).

Read in vLLM 0.33.0 (`vllm/v1/core/`, 2026-12-07). The load's admission is any load's
(`allocate_slots(request, 0, external 1, delay_cache_blocks)`: full attention's block 0, the
Mamba group's state block at 0 plus its speculative blocks). Reported done,
`_update_waiting_for_remote_kv` (`sched/scheduler.py:3467-3514`) calls
`cache_blocks(request, 1)` (nothing cached: a block holds 2 tokens or more here) and, the load
covering the whole prompt, rewinds `num_computed_tokens` to `num_tokens - 1` = 0 (3512-3513);
`_handle_blocked_waiting_request` (3518-3533) makes it WAITING and the same waiting loop goes
on with it: `num_computed_tokens == 0` (1107), so the lookup again
(`_get_local_prefix_cache_hit` 1118-1123 -> `get_computed_blocks_for_connector`, 669: no hit,
its longest is `num_tokens - 1` = 0) and the connector asked again
(`get_num_new_matched_tokens(request, 0)`, 1135-1139), while the request holds its blocks.
Then `allocate_slots` (1441; `kv_cache_manager.py:380-`) with no hit:
- the connector answers nothing (or only what a synchronous load may take, `num_tokens - 1` =
  0 tokens): `allocate_slots(request, 1)`, as a loaded request's resumption (`resume`):
  `remove_skipped_blocks(request, 1)` frees nothing, and `MambaManager.allocate_new_blocks`
  (`single_type_kv_cache_manager.py:1797-1834`) finds `cdiv(1, b) + spec` blocks held, no
  partial hit, no checkpoint: nothing new (full attention's block 0 held too); the step
  computes the token into the blocks the load wrote;
- it answers a load of the token again: `allocate_slots(request, 0, external 1,
  delay_cache_blocks)`: no hit adopted, full attention's `allocate_external_computed_blocks`
  returns for a request that holds its blocks and the Mamba group's allocation finds its
  blocks held: nothing taken, nothing freed, nothing recorded for zeroing; reported done, the
  request is at 0 computed tokens once more (kvfuzz's fake connector answers a bounded number
  of times).
Both counted exactly as a waiting request's step with its tables (`align_count.py`: the
watermark while others run, the whole sequence checked first, the reserve), the free queue as a
running request's allocation (`align_queue.py`: nothing taken); the caching check does not
judge the request from its first load on (a connector's admission: `align_caching.py`).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, short
from kvfuzz.fuzz.kvmanager import align_connector
from kvfuzz.fuzz.kvmanager.align_result import allocation_problems
from kvfuzz.fuzz.kvmanager.connector import LOADING
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING, state_read
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.strategies.kvmanager.connector_ops import EVERY_GROUP

RELOOKED = "Mamba connector: a one-token prompt loaded whole, looked up again"
LOADED_AGAIN = "Mamba connector: a one-token prompt loaded again, its blocks held"
EVENTS = (RELOOKED, LOADED_AGAIN)


class AlignExternalSingle:
    """Mixed into `AlignExternal`: a waiting request with a load done and no computed token
    (a one-token prompt loaded whole: `loaded_end` holds it, 0 computed)."""

    relooking = False  # (in `relooked_resume`: `_resume_loaded` makes the step)

    def single_relooked(self, rid: int, request) -> bool:
        return not request.computed and rid in self.loaded_end

    def relooked_resume(self, rid: int, request, chunk: int, *padding):
        """The plain step after the lookup again (a `schedule` of it makes the lookup first):
        `_resume_loaded`'s, and the request's tables after it as before (nothing freed or
        moved; full attention's grown by the blocks of the drafts' lookahead slots alone)."""
        if not self.looked_up:
            yield from self.relookup(rid, request)
        self.looked_up = False
        before = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        self.relooking = True
        try:
            problems = yield from self._resume_loaded(rid, request, chunk, *padding)
        finally:
            self.relooking = False
        if problems or request.status != RUNNING:  # (refused: the lock step's bound judged it)
            return problems
        after = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        # full attention's slots for the step's token and the drafts' lookahead, appended
        full = max(len(before[0]), cdiv(min(request.computed + self.trace.lookahead,
                                              self.trace.max_model_len), self.trace.block_size))
        if len(after) != 2 or list(after[0][:len(before[0])]) != list(before[0]) or \
                len(after[0]) != full or not all(after[0]) or list(after[1]) != list(before[1]):
            return [("external blocks", f"r{rid}'s one-token prompt, loaded whole, stepped while "
                                        f"it holds {short(before)}: expected its tables as they "
                                        f"were (full attention's {full} blocks long), actual "
                                        f"{short(after)}")]
        return []

    def relookup(self, rid: int, request):
        """The scheduler's lookup again (its answer judged as any connector lookup's: no hit),
        before the connector's second answer."""
        self.count(RELOOKED)
        trace = self.trace
        expected = align_connector.request_expectation(trace, self.cache, request)
        self.count(expected[0])
        yield Call(f"get_computed_blocks_for_connector(r{rid}): looked up again",
                   "connector_lookup", (rid,), oracle=None, compare=lambda e, r, actual, raised:
                   align_connector.lookup_problems(expected, actual, raised) or
                   self._lookup_block_problems(request, actual))
        self.looked_up = True  # (the step after it makes no lookup of its own)
        if self.caching_counts is not None:
            self.caching_counts[rid] = None  # (not judged by `align_caching.py`: counted)

    def relooked_connect(self, op, request):
        """A `connect` of such a request: the lookup again, then the connector's answer: a load
        of the token again, else (nothing it may load synchronously) the plain step."""
        rid = op.rid
        yield from self.relookup(rid, request)
        if not op.load or request.skip or not op.external:
            return (yield from self.relooked_resume(rid, request, op.chunk, op.pad,
                                                    op.rows_in_flight))
        self.count(LOADED_AGAIN)
        self.queue_alloc = (rid, False)  # (no block taken: a running request's allocation)
        others = any(r.status == RUNNING for other, r in self.requests.items() if other != rid)
        args = (rid, 0, 0, 1, True, op.reserve, self.trace.full_sequence_must_fit, others)
        if op.written != EVERY_GROUP and op.written != 3:
            args += (tuple(g for g in (0, 1) if op.written >> g & 1),)
        self.read("take_new_block_ids")  # (drained every step, as the scheduler's worker does)
        before = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        got = yield Call(f"allocate_slots(r{rid}, 0, external 1, delayed caching"
                         f"{f', {op.reserve} reserved' if op.reserve else ''}): loaded again",
                         "connect", args, oracle=None, compare=allocation_problems)
        counted = self._count_problems(rid, request, got.actual is not None, 0, others,
                                       external=1, reserved=op.reserve, waiting=True,
                                       lookahead=False)
        if got.actual is None:
            self.count("allocate_slots refused")
            return counted
        after = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        zeroed = self.read("take_new_block_ids")
        problems = counted + self.again_problems(rid, before, after, got.actual, zeroed)
        request.computed, request.status = 1, LOADING
        yield Call("", "set_computed", (rid, 1, LOADING), oracle=None)
        return problems

    @staticmethod
    def again_problems(rid, before, after, fresh, zeroed) -> list[tuple[str, str]]:
        """A load again of the token its blocks already hold: nothing allocated, every table as
        it was, nothing recorded for zeroing."""
        if any(fresh) or [list(t) for t in after] != [list(t) for t in before] or zeroed:
            return [("external blocks", f"r{rid}'s one-token prompt loaded again while it holds "
                                        f"{short(before)}: expected nothing allocated, no table "
                                        f"changed, nothing zeroed; new {short(fresh)}, tables "
                                        f"{short(after)}, zeroing records {short(zeroed)}")]
        return []
