"""The HiSparse reduced mode's admissions and refusals (`hisparse.py`): an admission made exactly
when the released counts say it fits (`hisparse_checks.admission_fits`), and a refusal judged
only with room for the most a step can need; beside a Mamba group ("hisparse cow") with the
Mamba group's count and the private copies of a hit inside a block counted too."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.hisparse_checks import HOT_BLOCKS, admission_fits, slots
from kvfuzz.oracle.kvmanager.align_count import Engine, Step, mamba_count
from kvfuzz.oracle.kvmanager.hybrid import cdiv

ROOMY_REFUSAL = "refusal judged: room for the most a step can need"
# speculative decoding's lookahead slots beside HiSparse (`Trace.lookahead`, since 2026-12-08)
LOOKAHEAD_BLOCKS = "HiSparse: a step's tables hold blocks for its lookahead slots only"
LOOKAHEAD_DECIDED = "HiSparse: an admission decided by its lookahead slots"
LOOKAHEAD_EVENTS = (LOOKAHEAD_BLOCKS, LOOKAHEAD_DECIDED)
MAMBA_STEP_MOST = 3  # a Mamba "align" step's blocks at most (`_refusal_problems`)


class Admissions:
    """The admission and refusal checks of `HiSparseLockstep` (a mixin)."""

    def slots(self, computed: int) -> int:
        """The token slots a step that leaves `computed` tokens asks (`hisparse_checks.slots`:
        with the trace's lookahead slots, cut at the model's length)."""
        return slots(computed, self.trace.lookahead, self.trace.max_model_len)

    def _admission_problems(self, rid, request, new, hit, source, indexer, others_running,
                            made) -> list:
        """An admission made exactly when the released counts say it fits
        (`admission_fits`), for the whole request first where the scheduler asks it."""
        trace, size = self.trace, self.trace.block_size
        watermark = int(trace.watermark * trace.blocks) if others_running else 0
        cap = cdiv(min(trace.max_in_flight_tokens or trace.max_model_len, trace.max_model_len),
                   size)
        counts = dict(size=size, hit=hit, source=source, indexer=indexer,
                      host_ref=self.host_ref, device_ref=self.device_ref)

        def fit(tokens, cap, main) -> bool:
            # (`tokens`: the slots the attention groups count, `main`: the tokens the Mamba
            # group counts; they differ by the lookahead slots, which take no Mamba block)
            device = admission_fits(tokens, cap, **counts)
            host = admission_fits(tokens, cap, host=True, **counts)
            if self.cow:
                more, mamba = partial_and_mamba(main, size, hit, self.mamba_hit,
                                                self.device_ref, trace.hash_size,
                                                trace.mamba_checkpoint,
                                                trace.mamba_speculative)
                device, host = device + more + mamba, host + more
            return device + watermark <= self.device_free and host <= self.host_free

        # the step with its lookahead slots; the whole request without them (`allocate_slots`
        # counts `full_num_tokens`, the request's tokens, for `full_sequence_must_fit`)
        main = min(hit + new, trace.max_model_len)
        fits = fit(self.slots(main), None, main)
        if self.slots(main) > main and fits != fit(main, None, main):
            self.count(LOOKAHEAD_DECIDED)  # (refused for its draft tokens' slots alone)
        if trace.full_sequence_must_fit:
            whole = min(len(request.tokens), trace.max_model_len)
            fits = fits and fit(whole, cap, whole)
        if fits == made:
            return []
        return [("None vs success", f"r{rid}: an admission of {new} tokens after a hit of {hit}: "
                                    f"expected {'blocks' if fits else 'None'} with "
                                    f"{self.device_free} device and {self.host_free} host "
                                    f"blocks free, actual {'blocks' if made else 'None'}")]

    def _refusal_problems(self, rid, request, new, hit, others_running) -> list:
        """A refusal with room for the most a step can need: per device group at most a block
        for every token slot, its lookahead slots too (the indexer's, the resident pages'),
        the hot region, the watermark at an admission while others run; on the host a block a
        slot. (A refusal short of that is not judged: HiSparse's admission counts are not
        modelled.)"""
        size, admission = self.trace.block_size, hit is not None
        slots = self.slots((hit or 0) + new if admission else request.computed + new)
        if admission and self.trace.full_sequence_must_fit:
            slots = max(slots, len(request.tokens))
        watermark = int(self.trace.watermark * self.trace.blocks) \
            if admission and others_running else 0
        device = 2 * cdiv(slots, size) + HOT_BLOCKS + watermark
        host = cdiv(slots, size)
        if self.cow:
            # Beside a Mamba "align" group: a hit inside a block takes a private block more in
            # each group that copies it (`_has_partial_local_hit`), and the Mamba group's step
            # at most its new state, that copy and the hit's state adopted off the free queue,
            # a prefill checkpoint's block and the speculative blocks where the group has them
            # (a state cached in the same step, which the group refuses, is forgotten after
            # every op: `mamba_step`)
            device = device + 1 + MAMBA_STEP_MOST + (self.trace.mamba_checkpoint > 0) + \
                self.trace.mamba_speculative
            host += 1
        if self.device_free < device or self.host_free < host:
            return []
        self.count(ROOMY_REFUSAL)
        return [("refusal", f"r{rid}: allocate_slots of {new} tokens"
                            f"{f' after a hit of {hit}' if admission else ''} refused with "
                            f"{self.device_free} device blocks free (it needs at most {device}) "
                            f"and {self.host_free} host blocks free (at most {host})")]


def partial_and_mamba(tokens, size, hit, mamba, device_ref, hash_size: int = 0,
                      checkpoint: int = 0, speculative: int = 0) -> tuple[int, int]:
    """Beside a Mamba "align" group ("hisparse cow"): the block more an admission whose hit
    ends inside a block counts in the source group and in the indexer each, for the private
    copy of the shared tail (`_has_partial_local_hit`); and the Mamba group's count
    (`MambaManager.get_num_blocks_to_allocate`, align mode,
    `oracle/kvmanager/align_count.mamba_count`, which the "mamba align" profile's exact counts
    share): the blocks past the hit's and its `speculative` blocks, one more for the copy of a
    hit inside a block, capped at the states it writes (its new one, that copy, the speculative
    blocks (a request new to the group) and, with `checkpoint` (the alignment, 0: none), a
    prefill checkpoint's where the chunk [hit, tokens) reaches a valid one, hashed per
    `hash_size`), plus the hit's state if it is free. (The retention interval is None here:
    every chunk may export a checkpoint.)"""
    step = Step(computed=0, new=tokens - hit, tokens=tokens, prompt=tokens, hit=hit,
                mamba_hit=tuple(mamba))
    engine = Engine(size, hash_size or size, tokens, speculative=speculative,
                    checkpoint=checkpoint)
    return int(hit % size != 0), mamba_count(engine, step, hit, tokens, (), device_ref)
