"""A KV-loaded request's first step beside a Mamba "align" group, padded or not, judged in the
reduced mode (a mixin of `AlignExternal`, `align_external.py`; the guard's workload
`vllm_workloads.MAMBA_MTP_CONNECTOR`).

vLLM 0.33.0's scheduler (`Scheduler.schedule`, the waiting loop's branch for a request with
computed tokens and no lookup, scheduler.py 1263-1272, then 1300-1370) pads that step as any
waiting request's (`padding.py`): where its load left one token (a whole prompt loaded, its
last token computed again for its logits), with drafts and a running request scheduled or
tokens computed, it asks `allocate_slots(request, 1 + k, num_lookahead_tokens)`. The aligned
split runs on the padded count after it (the step starts at the prompt's last token, below
`prefill_end`) and drops the padding whole where a mandatory stop falls inside the rows (the
next block boundary of a start inside a block): the trace's `pad` is what the scheduler kept,
read back by the guard from the call's count (`guard_connector._resumption`). The rows get
slots and are rejected at the step's output: the reduced mode allocates them, rolls them back
at once (under asynchronous scheduling, where asked, holds them to the `settle`, as a padded
`schedule`'s), and judges the Mamba table against the padded step's end until the request's
next step (`drafted_to`, as after rejected drafts). A plain admission through the connector
(no external tokens: a preempted request readmitted, a prompt met again) takes its `pad` to
the reduced mode's plain admission (`align_external.connect`, `align.py`).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, short
from kvfuzz.fuzz.kvmanager.align_external_single import AlignExternalSingle
from kvfuzz.fuzz.kvmanager.align_result import allocation_problems
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING, state_read

RESUMED = "Mamba connector: resumed after its load"
PADDED_RESUMPTION = "Mamba connector: resumed after its load, padded"
PADDED_ADMISSION = "Mamba connector: a plain admission through it, padded"
EVENTS = (PADDED_RESUMPTION, PADDED_ADMISSION)


class AlignResumeLoaded(AlignExternalSingle):
    """Mixed into `AlignLockstep` through `AlignExternal`."""

    def _resume_loaded(self, rid, request, chunk: int, pad: int = 0, asked: bool = False):
        """A loaded request's first step: an admission with no lookup (the scheduler's branch
        for a waiting request with computed tokens); the state it reads is the loaded one.
        `pad`, `asked`: the op's padding and `rows_in_flight`."""
        if self.single_relooked(rid, request) and not self.relooking:  # (`..._single`)
            return (yield from self.relooked_resume(rid, request, chunk, pad, asked))
        self.count(RESUMED)
        size, start = self.trace.block_size, request.computed
        tables = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        state, end = self.loaded_state.get(rid), self.loaded_end.get(rid, 0)
        if start == end and (len(tables) != 2 or len(tables[1]) <= (start - 1) // size or
                             tables[1][(start - 1) // size] != state):
            return [("mamba states", f"r{rid} resumes from {start} loaded tokens: the state its "
                                     f"step reads (position {(start - 1) // size}) expected the "
                                     f"loaded block {state}, its Mamba table "
                                     f"{short(tables[-1] if tables else tables)}")]
        left = len(request.tokens) - start
        rows = self._padded(left, start, chunk, pad, "after its load")  # (`padding.py`)
        new = self._chunk(request, start, min(chunk, left))
        if new <= 0:  # (the scheduler schedules no step of nothing)
            return []
        if rows:
            self.count(PADDED_RESUMPTION)
        held = self.rows_held(rows, asked)  # (asynchronous: to its `settle`)
        others = any(r.status == RUNNING for other, r in self.requests.items() if other != rid)
        got = yield Call(f"allocate_slots(r{rid}, {new + rows}): resumed after its load"
                         f"{f', {rows} placeholder drafts' if rows else ''}", "resume",
                         (rid, new + rows, others, self.trace.full_sequence_must_fit),
                         oracle=None, compare=allocation_problems)
        counted = self._count_problems(rid, request, got.actual is not None, new + rows, others,
                                       waiting=True)
        if got.actual is None:
            self.count("allocate_slots refused")
            return counted
        self.loaded_end.pop(rid, None)
        self.read_from[rid], request.computed = start, start + new + rows
        self._checkpoint(rid, request)
        self._flying(rid, request)
        if rows and not held:  # the rows rejected at once, the table the padded step's
            self.drafted_to[rid] = request.computed
            request.computed -= rows
        request.status, self.stepped = RUNNING, rid
        yield Call("", "set_computed", (rid, request.computed, RUNNING), oracle=None)
        return counted
