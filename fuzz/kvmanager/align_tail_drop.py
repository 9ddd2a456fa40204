"""A partial tail the scheduler drops for a KV connector's external tokens that the caller's cap
then drops too, beside a Mamba "align" group (the "capped mamba" profile), judged in the
reduced mode: a mixin of `AlignExternal` (`align_external.py`), which decides when.

vLLM 0.33.0's `Scheduler.schedule` (scheduler.py 1128-1210), the waiting branch, for a
connector lookup whose hit ends inside a block (`partial_tail`) and a connector holding more
than that tail past the block-aligned hit:
- the tail is dropped first (`truncate_computed_blocks` to `block_aligned_local`, the hit now
  that), the connector's tokens taken as external; the cap is applied after
  (`cap_external_hit`: 0 unless hit + external ends on full attention's block at most at
  `max_cache_hit`), and `load_kv_async &= external > 0`: with none kept, no load, asynchronous
  or not;
- a diverged hit (`hit_diverged`: full attention deeper than the Mamba group's state) with
  none kept is looked up again (`get_computed_blocks`, capped), which replaces the truncated
  view: the plain admission (`align.py`) judges that;
- a hit that did not diverge keeps the truncated view: the request is admitted with the
  block-aligned hit, nothing external (`allocate_slots(num_new_computed_tokens=aligned,
  new_computed_blocks=truncated, num_external_computed_tokens=0)`), its step's tokens from the
  aligned hit, split as any admission's (`_mamba_block_aligned_split` with that local hit).
  That is the admission this module drives and judges (`truncated_admission`): every check of
  a plain admission's allocation with that hit (counts, tables, which blocks, caching, events).

A finding (2026-12-07): the truncated view's Mamba blocks are all nulls (the lookup's state sat
in the partial block, at (local - 1) // b; `truncate_computed_blocks` keeps aligned // b
blocks), and nothing supplies the state at the aligned end: the request's first step reads its
state from column (aligned - 1) // b, a null (`preprocess_mamba`, `mamba_utils.py` 1493-1495,
copies from there), so its Mamba layers start from the null block's contents, not the prefix's
state. Only a hit that did not diverge meets it (a diverged one is looked up again) and only
past its first block (a hit cut to 0 reads no state). The reduced mode holds the release to it
(`align_reads.STATELESS`: that column null, every other check as any step's).
"""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.align_external_pad import PADDED_ADMISSION

# the hit admitted block-aligned: its tail dropped, then the external tokens the cap dropped
TRUNCATED = "Mamba connector: a partial tail dropped, the cap dropping the external tokens: " \
            "the block-aligned hit admitted, nothing loaded"
EVENTS = (TRUNCATED,)


class AlignTailDrop:
    """Mixed into `AlignLockstep` through `AlignExternal` (its `_allocate`, `_chunk`,
    `_padded`, `rows_held`)."""

    def truncated_admission(self, op, request, hit: int, boundary: int):
        """The scheduler's admission of the truncated hit (`hit` tokens, block-aligned, the
        driver holding the truncated view) with nothing loaded: no lookup of its own, the
        connector lookup's shared-prefix boundary kept (`request.shared_prefix_boundary`)."""
        self.count(TRUNCATED)
        request.boundary = boundary
        self.count("admission with a hit" if hit else "admission, no hit")
        if op.pad:  # (a prompt met again padded: `align_external_pad.py`)
            self.count(PADDED_ADMISSION)
        left = len(request.tokens) - hit
        rows = self._padded(left, hit, op.chunk, op.pad, "beside a Mamba group")
        held = self.rows_held(rows, op.rows_in_flight)  # (asynchronous: to its `settle`)
        new = self._chunk(request, hit, min(op.chunk, left)) + rows
        if hit:  # (its Mamba blocks all nulls)
            self.hold_to_finding(op.rid)
        return (yield from self._allocate(op.rid, request, new, hit, 0 if held else rows))

    def hold_to_finding(self, rid: int) -> None:
        """The request's next step reads no state (the finding): `align_reads.STATELESS`."""
        self.stateless.add(rid)
