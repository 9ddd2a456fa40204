"""The reduced Mamba "align" mode (`align.py`) under asynchronous scheduling: tokens in flight,
as vLLM's `AsyncScheduler` makes them (a request's next step allocated before its last step's
output is processed). A mixin of `AlignLockstep`. What vLLM 0.33.0 does differently then:

- `allocate_slots` passes the request's tokens in flight (`num_in_flight_tokens`) and frees
  the skipped blocks on the processed count, `max(0, c - in flight)` (kv_cache_manager.py
  ~563-567): the Mamba group keeps the state its oldest step in flight reads and what every
  step in flight writes (`mamba_align.flight_positions`), and the exact count frees only the
  states below the processed one (`oracle/kvmanager/align_count.freed`);
- a running request whose tokens are all computed gets the slot of the token its step in
  flight samples (`placeholder`): a step of one token, judged as any step;
- the scheduler's `cache_blocks` after an output (`settle`) caches what is processed
  (`align_drafts.settle`), judged only where vLLM's scheduler makes one (`settle_made`: after
  its output's `sample`, at the tokens but the last; since 2026-12-06, later, "mamba align"
  index 2294).

And what the worker does with it: a step in flight reads its state when the worker runs it,
after the scheduler allocated the steps after it, so the block it reads must still be the
request's then, after every op until its output is processed (`flight_read_problems`; a
request preempted with a step in flight drops that step's output, vLLM's stale output, so only
running requests are judged). Draft tokens in flight (since 2026-12-06): a `placeholder`'s
drafts, and a `settle` rolling them back (`settle_made` too).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.oracle.kvmanager import mamba_align
from kvfuzz.strategies.kvmanager.trace import Placeholder

STEP = "Mamba align: a step with tokens in flight"
KEPT = "Mamba align: a state kept for a step in flight"
READ = "Mamba align: a step in flight's state still held"
DRAFTS = "Mamba align: draft tokens in flight"
UNMADE = "Mamba align: a settle rolling back drafts vLLM never makes, resolved to nothing"
# (since 2026-12-06, later: a settle rejecting none, index 2294 of the shared-prefix draw)
UNMADE_OUTPUT = "Mamba align: a settle with no output vLLM processes, resolved to nothing"
EVENTS = (STEP, KEPT, READ, DRAFTS, UNMADE, UNMADE_OUTPUT)


class AlignAsync:
    """Mixed into `AlignLockstep` (its `align`, `trace`, `requests`, `mamba_rows`,
    `worker_rows`, `read_from`, `checkpoints`, `tails`, `flown`, `count`, `_allocate`)."""

    def start_worker(self) -> None:
        super().start_worker()  # (`align_reads`)
        self.start_flights()

    def start_flights(self) -> None:
        # rid -> its steps in flight, oldest first: [start, end, checkpoint, block read]
        self.flight_steps: dict[int, list] = {}
        # rid -> the table positions its last allocation kept for the steps in flight then
        self.flight_kept: dict[int, frozenset] = {}
        # the steps in flight at this op's allocation (rid, steps): the engine processes the
        # last one's output after the allocation, which the trace's one step in flight drops
        self.flew: tuple[int, list] | None = None
        self.step_read = None  # the column the op's step read (`align_reads`), if it was read
        # rid -> its tokens at its last allocation or `settle`: an output's `sample`s come after
        self.output_from: dict[int, int] = {}

    def align_in_flight(self, request, admission: bool) -> int:
        """The tokens in flight an allocation passes (none at an admission or when synchronous),
        as the lock step passes them (`lockstep._allocation`)."""
        return request.in_flight if self.trace.async_scheduling and not admission else 0

    def flights_allocated(self, rid, request, in_flight: int) -> None:
        """After a successful allocation of the step [start, request.computed) (`read_from`,
        its checkpoint in `checkpoints`): the positions it keeps for the steps in flight then,
        and the step itself in flight."""
        if not self.trace.async_scheduling:
            return
        self.output_from[rid] = len(request.tokens)
        start, checkpoint = self.read_from[rid], self.checkpoints.get(rid)
        steps = self.flight_steps.get(rid, [])
        steps = steps[len(steps) - len(request.flights):] if request.flights else []
        self.flight_kept[rid] = mamba_align.flight_positions(
            max(0, start - in_flight), [tuple(s[:3]) for s in steps], self.trace.block_size)
        if in_flight:
            self.count(STEP)
        self.flew = (rid, steps)
        self.flown(request, request.computed - start)
        self.flight_steps[rid] = (steps + [[start, request.computed, checkpoint, None]])[
            len(steps) + 1 - len(request.flights):]

    def tail_in_flight(self, rid, request) -> tuple[bool, tuple]:
        """At a finish: whether a partial tail is expected handed off (its last step keyed one,
        `tails`; with tokens in flight vLLM hands nothing off), and the tokens in flight the
        driver's `finalize_tail` is given (under asynchronous scheduling only)."""
        flying = (request.in_flight,) if self.trace.async_scheduling else ()
        return rid in self.tails and not self.align_in_flight(request, False), flying

    def flights_forget(self, rid) -> None:
        """At a preemption or a finish (`align.free`): its steps in flight, its checkpoint, its
        draft end."""
        self.checkpoints.pop(rid, None)
        self.drafted_to.pop(rid, None)
        self.flight_steps.pop(rid, None)
        self.flight_kept.pop(rid, None)
        self.output_from.pop(rid, None)

    def _count_problems(self, rid, request, made: bool, *args, **kwargs):
        """(`align_count`'s, after every allocation): the request's last allocation refused,
        or not, as the lock step's `_allocation` notes it (a `preempt` with `refused`)."""
        request.refused = None if made else self.preemptions
        return super()._count_problems(rid, request, made, *args, **kwargs)

    def refusal_unmade(self, op, request) -> bool:
        """Whether a `preempt` with `refused` resolves to nothing: its request's last
        allocation was not refused (`free_ops.refusal_preempts` counts the others)."""
        return getattr(op, "refused", False) and getattr(request, "refused", None) is None

    def settle_made(self, op, request) -> bool:
        """Under asynchronous scheduling, whether a `settle` is one vLLM 0.33.0 makes:
        `update_from_output` caches only for the step whose output it processes, an output that
        carries its sampled token (`scheduler.py` 2403-2415, `if new_token_ids`), after taking
        that step's tokens out of flight (2318), so at `num_computed_tokens -
        num_in_flight_tokens` = the request's tokens but the last sampled one (whose slot the
        next step holds); and it rolls back only that step's drafts (2349-2364, `if
        scheduled_spec_token_ids and generated_token_ids`), one rollback an output. So: a
        `sample` since the request's last allocation or settle, and the count cached (after the
        rollback) its tokens but the last. Else the settle resolves to nothing: the reduced
        mode cannot judge one, whose `cache_blocks` below the processed count can key the
        wrong state (`MambaManager._cache_partial_tail_block`): with drafts the prompt's
        partial tail and the next step's copy-on-write ("mamba align" index 1390 while
        `mamba_async.drafted` made such settles); without, a settle with the step whose output
        it stands for still counted in flight (no output yet, or a refused allocation after
        its `sample` keeping it) keys the block holding a later state under a shorter hash, and
        vLLM's own next `cache_blocks` trips `cache_full_blocks`' assertion (index 2294 with the
        shared-prefix checkpoint, and without it on the same ops). Every settle of vLLM's
        AsyncScheduler that the guard recorded (MAMBA_ASYNC_MTP, MAMBA_ASYNC, its pipeline,
        its connector, MAMBA_ASYNC_SHARED_PREFIX) is one."""
        if not self.trace.async_scheduling:
            return True
        came = len(request.tokens) > self.output_from.get(op.rid, -1)
        if came and request.computed - op.rejected - request.in_flight == len(request.tokens) - 1:
            return True
        self.count(UNMADE if op.rejected else UNMADE_OUTPUT)
        return False

    def settled(self, rid, request) -> None:
        """After a `settle` that applied: the output is done; the next one samples anew."""
        self.settle_applied = rid  # (its caching judged: `align_caching_settle.py`)
        if self.trace.async_scheduling:
            self.output_from[rid] = len(request.tokens)

    def flight_read(self, rid) -> None:
        """The column the step just allocated reads (`align_reads`' `step_read`): its block
        noted, judged while the step flies."""
        read, self.step_read = self.step_read, None
        steps = self.flight_steps.get(rid) if self.trace.async_scheduling else None
        row = self.worker_rows.get(rid, [])
        if steps and read is not None and read < len(row):
            steps[-1][3] = row[read]

    def flight_read_problems(self) -> list[tuple[str, str]]:
        """After every op: each running request's steps still in flight (and those in flight at
        this op's allocation) read a block it still holds (the worker runs them later)."""
        problems, flew, self.flew = [], self.flew, None
        if not self.trace.async_scheduling:
            return problems
        for rid, request in self.requests.items():
            steps = self.flight_steps.get(rid, [])
            steps = steps[len(steps) - len(request.flights):] if request.flights else []
            if flew is not None and flew[0] == rid:
                steps = flew[1] + steps
            if not steps or request.status != RUNNING:
                continue
            held = set(self.mamba_rows.get(rid, ()))
            for start, end, _checkpoint, block in steps:
                if not block:
                    continue
                self.count(READ)
                if block not in held:
                    problems.append(("mamba reads", (
                        f"r{rid}'s step from {start} to {end} tokens, still in flight, reads its "
                        f"state from block {block}, no longer the request's (its Mamba table "
                        f"{self.mamba_rows.get(rid)}): freed before the worker ran the step")))
        return problems[:2]

    @handles(Placeholder)
    def placeholder(self, op: Placeholder):
        if not self.align:
            return (yield from super().placeholder(op))
        request = self.requests.get(op.rid)
        # With drafts (speculative Mamba blocks): the token, its drafts counted computed past
        # the request's tokens until the `settle` rolls the rejected back, as `AsyncOps`; a
        # request that sat out a step (its last token uncomputed) schedules them too
        new = 1 + op.drafts
        if request is None or request.status != RUNNING or not self.trace.async_scheduling or \
                request.computed < len(request.tokens) - (1 if op.drafts else 0) or \
                request.computed + new >= self.trace.max_model_len:
            return
        self.count("placeholder slot (token in flight)")
        if request.computed % self.trace.block_size == 0:
            self.count("placeholder slot into a new block")
        if op.drafts:
            self.count(DRAFTS)
        drafts = f" and {op.drafts} drafts" if op.drafts else ""
        yield Call(f"allocate_slots(r{op.rid}, {new}): the slot of the token in flight{drafts}")
        return (yield from self._allocate(op.rid, request, new, None))
