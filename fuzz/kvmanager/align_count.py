"""The reduced mode of Mamba "align" (`align.py`) judging every `allocate_slots` exactly: made
when the released counts say it fits, refused when not (`oracle/kvmanager/align_count.py`), from
what the trace and the pool show before the op: the request's tokens, the hit's blocks per
group, its tables, every block's reference count and the free blocks. Two facts the pool does
not show directly are kept here from the steps the lock step saw:

- a copy-on-write pending for a running request (the Mamba group's `_partial_hit_reqs`): its
  last successful step keyed its own partial tail (the state it wrote cached under its hash of
  its computed tokens, inside a block: `boundary.tail_keyed`, which the lock step keeps as
  `tails`) and took no prefill checkpoint (that step's `_cache_partial_tail_block` re-keys the
  checkpoint block instead and records no copy); the next successful step makes the copy, a
  refused one leaves it pending, a free drops it;
- whether the request has been allocated blocks since its admission (`_allocated_block_reqs`):
  it has once a step of it was made (it runs).

A mixin of `AlignLockstep`."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager import align_eagle
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.oracle.kvmanager.align_count import Engine, Step, fits

ADMISSION = "count judged exactly: an admission"
STEP = "count judged exactly: a running request's step"
REFUSED = "count judged exactly: a refusal"
EVENTS = (ADMISSION, STEP, REFUSED)


class AlignCountChecks:
    def _engine(self) -> Engine:
        trace = self.trace
        return Engine(trace.block_size, trace.hash_size, trace.max_model_len, trace.lookahead,
                      trace.mamba_speculative, trace.mamba_checkpoint, trace.retention == 0,
                      int(trace.watermark * trace.blocks), trace.hash_lookahead, trace.eagle)

    def _count_problems(self, rid, request, made: bool, new: int, others_running: bool, *,
                        hit: int | None = None, external: int = 0, reserved: int = 0,
                        waiting: bool | None = None, lookahead: bool = True,
                        in_flight: int = 0) -> list:
        """An `allocate_slots` of `new` tokens made exactly when the released counts say it
        fits (`made`: whether it was): an admission adopting a hit of `hit` tokens (the hit's
        blocks `self.hit_blocks`) and `external` tokens, or (`hit` None) a step of a request
        with tables, running or (`waiting`) resuming after its load; a waiting one's with the
        watermark while others run and the whole sequence checked first where the engine
        asks it; `in_flight`: its tokens in flight (asynchronous scheduling)."""
        admission, trace = hit is not None, self.trace
        waiting = admission if waiting is None else waiting
        hit_blocks = self.hit_blocks if admission else ((), ())
        step = Step(computed=request.computed, new=new, tokens=len(request.tokens),
                    prompt=request.prompt, hit=hit or 0, external=external,
                    full_hit=tuple(hit_blocks[0]), mamba_hit=tuple(hit_blocks[1]),
                    full_table=0 if admission else (self.lengths.get(rid) or (0, 0))[0],
                    mamba_table=() if admission else tuple(self.mamba_rows.get(rid, ())),
                    pending_copy=not admission and rid in self.pending_copy,
                    allocated=not admission and (request.status == RUNNING or
                                                 rid in self.loaded_end),
                    watermark=waiting and others_running,
                    whole=waiting and trace.full_sequence_must_fit, reserved=reserved,
                    lookahead=lookahead, in_flight=in_flight)
        free = sum(1 for count in self.ref[1:] if count == 0)
        expected, why = fits(self._engine(), step, free, self.ref)
        self.count(ADMISSION if waiting else STEP)
        if not made:
            self.count(REFUSED)
        if expected == made:
            return []
        what = f"an admission of {new} tokens after a hit of {hit}" if admission else \
            f"a step of {new} tokens after {request.computed}"
        if external:
            what += f" and {external} external"
        return [("None vs success", f"r{rid}: allocate_slots of {what}: expected "
                                    f"{'blocks' if expected else 'None'} ({why}), actual "
                                    f"{'blocks' if made else 'None'}")]

    def _note_copy(self, rid, request, made: bool, before=None) -> None:
        """After a step of `rid`: a copy-on-write pending for its next step where this one was
        made and keyed its own partial tail with no checkpoint (see the module's docstring;
        with k - 1 tokens held back, at its cacheable tokens: `align_eagle.held_tail_keyed`,
        `before`: the pool's keys before the op)."""
        if not made:
            return
        held = before is not None and align_eagle.held_tail_keyed(
            self.trace, request, self.mamba_tables.get(rid, []), before, self.keys)
        if (held or self.tails.get(rid) == request.computed) and rid not in self.checkpoints:
            self.pending_copy.add(rid)
        else:
            self.pending_copy.discard(rid)
