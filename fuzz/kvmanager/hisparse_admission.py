"""The HiSparse reduced mode's admissions and refusals (`hisparse.py`): an admission made exactly
when the released counts say it fits (`hisparse_checks.admission_fits`), and a refusal judged
only with room for the most a step can need. Off beside a Mamba group ("hisparse cow": its
counts are not modelled here)."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.hisparse_checks import HOT_BLOCKS, admission_fits
from kvfuzz.oracle.kvmanager.hybrid import cdiv

ROOMY_REFUSAL = "refusal judged: room for the most a step can need"


class Admissions:
    """The admission and refusal checks of `HiSparseLockstep` (a mixin)."""

    def _admission_problems(self, rid, request, new, hit, source, indexer, others_running,
                            made) -> list:
        """An admission made exactly when the released counts say it fits
        (`admission_fits`), for the whole request first where the scheduler asks it."""
        trace, size = self.trace, self.trace.block_size
        if self.cow:  # (the Mamba group's counts are not modelled here)
            return []
        watermark = int(trace.watermark * trace.blocks) if others_running else 0
        cap = cdiv(min(trace.max_in_flight_tokens or trace.max_model_len, trace.max_model_len),
                   size)
        counts = dict(size=size, hit=hit, source=source, indexer=indexer,
                      host_ref=self.host_ref, device_ref=self.device_ref)
        fits = admission_fits(min(hit + new, trace.max_model_len), None, **counts) + \
            watermark <= self.device_free
        host = admission_fits(min(hit + new, trace.max_model_len), None, host=True, **counts)
        fits = fits and host <= self.host_free
        if trace.full_sequence_must_fit:
            whole = min(len(request.tokens), trace.max_model_len)
            fits = fits and admission_fits(whole, cap, **counts) + watermark <= \
                self.device_free and admission_fits(whole, cap, host=True, **counts) <= \
                self.host_free
        if fits == made:
            return []
        return [("None vs success", f"r{rid}: an admission of {new} tokens after a hit of {hit}: "
                                    f"expected {'blocks' if fits else 'None'} with "
                                    f"{self.device_free} device and {self.host_free} host "
                                    f"blocks free, actual {'blocks' if made else 'None'}")]

    def _refusal_problems(self, rid, request, new, hit, others_running) -> list:
        """A refusal with room for the most a step can need: per device group at most a block
        for every token slot (the indexer's, the resident pages'), the hot region, the
        watermark at an admission while others run; on the host a block a slot. (A refusal
        short of that is not judged: HiSparse's admission counts are not modelled.)"""
        size, admission = self.trace.block_size, hit is not None
        if self.cow:  # (nor the most a Mamba group's step may need)
            return []
        slots = (hit or 0) + new if admission else request.computed + new
        if admission and self.trace.full_sequence_must_fit:
            slots = max(slots, len(request.tokens))
        watermark = int(self.trace.watermark * self.trace.blocks) \
            if admission and others_running else 0
        device = 2 * cdiv(slots, size) + HOT_BLOCKS + watermark
        if self.device_free < device or self.host_free < cdiv(slots, size):
            return []
        self.count(ROOMY_REFUSAL)
        return [("refusal", f"r{rid}: allocate_slots of {new} tokens"
                            f"{f' after a hit of {hit}' if admission else ''} refused with "
                            f"{self.device_free} device blocks free (it needs at most {device}) "
                            f"and {self.host_free} host blocks free (at most "
                            f"{cdiv(slots, size)})")]
