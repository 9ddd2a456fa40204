"""The swa lock step's handlers of a live guard's by-slot ops (the engine's own calls, recorded
by `fuzz/swa/guard.py`): allocations and releases named by lengths and full slots, not
requests, and the prefix cache's re-pairing of the mapping. What they hand out is held by "the
engine" until a release names it (`engine_pages`, `engine_window`)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles
from kvfuzz.strategies.swa.trace import (RELEASES, AllocSlots, ClearMapping, DecodeSlots,
                                         ExtendSlots, ExtendTailSlots, FreeSegments, FreeSlots,
                                         SetMapping, describe_slot_op)


class SlotCalls:
    """Mixed into `SWALockstep`, which keeps the tables these read and write."""

    @handles(AllocSlots)
    def alloc_slots(self, op: AllocSlots):
        if self.P == 1:  # upstream's contract: alloc at page size 1 only
            yield from self._engine_alloc(op, "alloc", (op.need_size,))

    @handles(ExtendSlots)
    def extend_slots(self, op: ExtendSlots):
        if self.P > 1 and all(0 <= q <= s for q, s in zip(op.prefix_lens, op.seq_lens)):
            yield from self._engine_alloc(op, "alloc_extend", (
                list(op.prefix_lens), list(op.seq_lens), list(op.last_loc)))

    @handles(ExtendTailSlots)
    def extend_tail_slots(self, op: ExtendTailSlots):
        if self.P > 1 and 0 <= op.prefix_len <= op.seq_len and \
                op.tail <= op.seq_len - op.prefix_len and (op.seq_len - op.tail) % self.P == 0:
            yield from self._engine_alloc(op, "alloc_extend_swa_tail", (
                [op.prefix_len], [op.seq_len], [op.last_loc], op.tail), tail=op.tail)

    @handles(DecodeSlots)
    def decode_slots(self, op: DecodeSlots):
        if self.P > 1 and all(s >= 1 for s in op.seq_lens):
            yield from self._engine_alloc(op, "alloc_decode",
                                          (list(op.seq_lens), list(op.last_loc)))

    def _engine_alloc(self, op, method: str, args: tuple, tail: int | None = None):
        """Outside the contract (the wrong page size, a length below its prefix) is no call:
        the guard refuses those before they are made."""
        call = Call(describe_slot_op(op), method, args, compared=True)
        self._count_alloc(call)
        got = (yield call).actual
        if got is not None:
            self.engine_pages |= {slot // self.P for slot in got}
            self.engine_window |= set(got if tail is None else got[len(got) - tail:])

    @handles(FreeSlots, FreeSegments)
    def free_engine_slots(self, op):
        segmented = isinstance(op, FreeSegments)
        args = (op.segments(),) if segmented else (list(op.slots),)
        yield Call(describe_slot_op(op), RELEASES[op.pools, segmented], args)
        # the pages released: each segment's by its page representatives, as upstream's
        reps = [slot for slots, _ in args[0] for slot in slots[::self.P]] if segmented \
            else op.slots
        pages = {slot // self.P for slot in reps}
        if op.pools in ("both", "swa"):  # the SWA peers of every slot of those pages
            self.engine_window = {slot for slot in self.engine_window
                                  if slot // self.P not in pages}
        if op.pools in ("both", "full", "full_pool"):
            self.engine_pages -= pages
        if op.pools in ("full", "full_pool"):
            self.freed_mapped = (op, {slot for slot in op.slots if self.model.mapping.get(slot)})

    @handles(SetMapping)
    def set_mapping(self, op: SetMapping):
        yield Call(describe_slot_op(op), "set_mapping", (list(op.full), list(op.swa)))
        for full, peer in zip(op.full, op.swa):
            (self.engine_window.add if peer else self.engine_window.discard)(full)

    @handles(ClearMapping)
    def clear_mapping(self, op: ClearMapping):
        peers = {self.model.mapping.get(full, 0) for full in op.full} - {0}
        yield Call(describe_slot_op(op), "clear_mapping", (list(op.full),))
        self.engine_window -= set(op.full)
        self.transit = (op, peers)
