"""The state each step reads and writes as vLLM's worker sees the Mamba table, judged in the reduced
Mamba "align" mode (`align.py`) and in the HiSparse mode joined with it (`hisparse_cow.py`'s
`mamba_step_problems`). A mixin of `AlignLockstep`.

The kept-states rule (`mamba_align.table_problems`) holds the scheduler's table after a step; the
worker reads through its own copy of the table (`mamba_align.worker_columns`: the scheduler's
whole table when the request is new to it, the step's new blocks appended after that, never the
nulls the scheduler puts in later). So here, after every step: the worker's copy kept as vLLM's
`gpu_model_runner._update_states` keeps it, the column the step's `preprocess_mamba` copies from
a block the request still holds, the columns it writes the scheduler's
(`mamba_align.read_problems`). A request leaves the worker's batch when it stops running (a
finish or preemption: `cleanup_mamba_state_idx` forgets its column; a resumed request's table
is replaced). Not judged: the recompute of a whole prompt loaded by a connector (its step reads
column (c - 2) // b, where the load left the state of all c tokens or a null: vLLM's own
connectors never load a whole prompt beside a Mamba group, `docs/upstream-vllm.md`).
Held to vLLM 0.33.0's finding (2026-12-07, `align_tail_drop.py`): the first step after a hit
the scheduler truncated to the block, with nothing loaded, reads a null column (`STATELESS`);
a block there is reported.
"""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.oracle.kvmanager import mamba_align

READ = "Mamba align: a step's state read by the worker"
COPIED = "Mamba align: a step's state copied to a new column"
WHOLE = "Mamba align: a whole prompt's recompute not judged"
# vLLM 0.33.0's finding (`align_tail_drop.py`): the first step after a block-aligned hit whose
# partial tail was truncated away reads a null column, the state no group kept
STATELESS = "Mamba align: a step reading no state after a truncated hit (vLLM 0.33.0)"
EVENTS = (READ, COPIED, WHOLE, STATELESS)


class AlignReads:
    """Mixed into `AlignLockstep` (its `trace`, `requests`, `read_from`, `mamba_rows`,
    `checkpoints`, `loaded_end`, `count`)."""

    def start_worker(self) -> None:
        self.worker_rows: dict[int, list] = {}   # rid -> the worker's copy of its Mamba table
        self.worker_state: dict[int, int] = {}   # rid -> the column its last step wrote
        self.ends_before: dict[int, int] = {}    # `loaded_end` before the op
        self.stateless: set[int] = set()         # rids whose step reads no state (the finding)

    def read_step_problems(self, rid, request) -> list[tuple[str, str]]:
        """After a step of `rid` (its Mamba table read into `mamba_rows`): the worker's copy
        updated, the step's reads and writes judged."""
        rows, states = self.worker_rows, self.worker_state
        stateless = rid in self.stateless  # (its first step only: the mark goes here)
        self.stateless.discard(rid)
        # a loaded request's first step from one token short of its load: a whole prompt's
        whole = rid not in self.loaded_end and \
            self.ends_before.get(rid) == self.read_from.get(rid, 0) + 1
        table = self.mamba_rows.get(rid, [])
        row = rows.get(rid)
        row = list(table) if row is None else row + list(table[len(row):])
        rows[rid] = row
        size = self.trace.block_size
        read, written = mamba_align.worker_columns(self.read_from.get(rid, 0), request.computed,
                                                   size, states.get(rid))
        states[rid] = written
        self.step_read = read  # (a step in flight's read, judged while it flies: `align_async`)
        if whole:
            self.count(WHOLE)
            return []
        if read is not None:
            self.count(READ)
            if read != written:
                self.count(COPIED)
        if stateless and read is not None:  # (the finding: held to it)
            self.count(STATELESS)
            if read < len(row) and row[read]:
                return [("mamba reads", f"r{rid}'s step from {self.read_from.get(rid, 0)} "
                                        f"tokens, its hit truncated to them: column {read} "
                                        f"holds block {row[read]} (its copy {row}), where the "
                                        f"cut view's Mamba blocks are all nulls (the lookup's "
                                        f"state lay in the dropped tail; vLLM 0.33.0 reads no "
                                        f"state there, its finding): a state of other tokens")]
            read = None  # (its writes judged as any step's)
        wrong = mamba_align.read_problems(row, table, read, written, self.trace.mamba_speculative,
                                          self.checkpoints.get(rid))
        return [("mamba reads", f"r{rid}'s step from {self.read_from.get(rid, 0)} to "
                                f"{request.computed} tokens: {wrong}")] if wrong else []

    def leave_worker(self) -> None:
        """After every op: forget the worker's copy of every request no longer running, and
        note the loads in flight or done (`ends_before`, for the next op)."""
        for rid in [rid for rid in self.worker_rows
                    if getattr(self.requests.get(rid), "status", None) != RUNNING]:
            self.worker_rows.pop(rid, None)
            self.worker_state.pop(rid, None)
        self.ends_before = dict(self.loaded_end)
        self.stateless = {rid for rid in self.stateless  # (an admission refused: none read)
                          if getattr(self.requests.get(rid), "status", None) == RUNNING}
