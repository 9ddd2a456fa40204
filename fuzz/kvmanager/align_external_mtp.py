"""Multi-module MTP's held-back tokens with EAGLE's drop beside a Mamba "align" group, with a KV
connector's ops (since 2026-12-07; the "mamba connector" profile's MTP share,
`strategies/kvmanager/mamba_eagle.mtp`, k of 2 to min(4, hash unit)): a mixin ahead of
`AlignExternalEagle` that keeps the tail a step or a load keyed at its cacheable tokens, for its
copy's offer, and counts what the pair does on the connector's path. The rules are the held-back
tokens' (`align_eagle.py`: `cacheable`, `held_tail_keyed`), the drop's and the connector's
(`align_external.py`, `align_caching_external.py`), each reading `Trace.prefill_lookahead`.
What vLLM 0.33.0 does, read in its source:

- the connector's lookup (`get_computed_blocks_for_connector`, `find_longest_cache_hit_per_group`,
  capped at `num_tokens - 1`) and the admission with external tokens (`allocate_slots` with
  `delay_cache_blocks` for a load) never read `num_prefill_lookahead`: the drop's margin is one
  drop unit whatever k (the coordinator only refuses k above the scheduler block);
- a load reported done (`_update_waiting_for_remote_kv`): `cache_blocks(request, c)`, and the
  hybrid coordinator's `get_num_cacheable_tokens` holds k - 1 of the c loaded tokens back in
  every group, as after a step: full attention's blocks cached to c - (k - 1) cut to the block,
  the Mamba group's full-block states likewise, and its boundary offers only up to there;
- there `MambaManager._cache_partial_tail_block` (no checkpoint: a load's admission has none)
  keys the prompt's tail boundary P // h * h - h (with the drop) when the cacheable tokens land
  on it, on the block of the Mamba table at column cdiv(c - k + 1, b) - 1: the external state's
  block ((c - 1) // b) when both lie in one block. It records the request in `_partial_hit_reqs`
  and as that tail's producer, so the resumed step's `allocate_new_blocks` takes a copy-on-write
  block (its count holds it: `align_count._note_copy`) and offers the copy at the boundary. A
  connector that keeps MTP's window off the prefiller (nixl's `_prefill_backoff`, k - 1 tokens
  or 1 beside Mamba) loads c = P - (k - 1) or so: the shape is a P/D decoder's every load;
- `evict_blocks` between the load and the resumption drops the tail's entry: the copy then
  moves no hash and is offered under none, as after a step (`boundary.offload_problems`'s
  `evicted_tail`, which `copied_tail` below now also gives for a tail keyed at the cacheable
  tokens, with or without a connector);
- the resumption's chunk and its prefill checkpoint (`get_mamba_prefill_checkpoint_position`
  with the drop) do not read k; the scheduler's `_reserve_prefill_lookahead`, which never ends a
  chunk within k of the prefill end, is the scheduler's (the manager takes any chunk: not drawn).
k above the hash unit stays refused (the codec: vLLM's scheduler stalls or its manager asserts).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import handles
from kvfuzz.fuzz.kvmanager import align_eagle
from kvfuzz.fuzz.kvmanager.align_external_eagle import EVENTS as EAGLE, AlignExternalEagle
from kvfuzz.fuzz.kvmanager.connector import LOADING
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING, WAITING
from kvfuzz.strategies.kvmanager.connector_ops import Loaded

HELD = "Mamba connector with MTP: a load done, its cached blocks cut by the held-back tokens"
TAIL = "Mamba connector with MTP: a load done keyed the prompt's tail at its cacheable tokens"
RESUMED = "Mamba connector with MTP: resumed after its load"
COPIED = "held-back tokens: the copy of a tail keyed at the cacheable tokens taken"
OWN = (HELD, TAIL, RESUMED, COPIED)
EVENTS = (*EAGLE, *OWN)


class AlignExternalMtp(AlignExternalEagle):
    """`AlignExternalEagle` with multi-module MTP's held-back tokens (mixed into `AlignLockstep`
    in its place, ahead of `AlignCountChecks`, whose `_note_copy` it wraps)."""

    def start_worker(self) -> None:  # (called by `AlignLockstep.build_model`)
        super().start_worker()  # (`align_reads`)
        self.held_tails: dict[int, int] = {}  # rid -> a tail its last step keyed held back

    @handles(Loaded)
    def loaded(self, op: Loaded):
        request = self.requests.get(op.rid)
        held = self._mtp(request) and request.status == LOADING and op.valid < 0
        end = request.computed if held else 0
        problems = yield from super().loaded(op)
        size = self.trace.block_size
        if held and request.status == WAITING and \
                align_eagle.cacheable(self.trace, end) // size < end // size:
            self.count(HELD)
        return problems

    def _resume_loaded(self, rid, request, chunk: int, *padding):
        problems = yield from super()._resume_loaded(rid, request, chunk, *padding)
        if self._mtp(request) and request.status == RUNNING:
            self.count(RESUMED)
        return problems

    def _note_copy(self, rid, request, made: bool, before=None) -> None:
        """After a step or a load done of `rid`: the tail it keyed at its cacheable tokens, new
        in the op (`align_eagle.held_tail_keyed`), whose copy its next step offers."""
        super()._note_copy(rid, request, made, before)
        if made and before is not None and align_eagle.held_tail_keyed(
                self.trace, request, self.mamba_tables.get(rid, []), before, self.keys):
            self.held_tails[rid] = align_eagle.cacheable(self.trace, request.computed)
            if request.status == WAITING and rid in self.loaded_end:  # (a load done)
                self.count(TAIL)
        else:
            self.held_tails.pop(rid, None)

    def copied_tail(self, rid: int) -> int | None:
        """The tokens of the partial tail whose copy this op may offer (`state`'s
        `evicted_tail`): the one its last step keyed at its computed tokens, or with k - 1
        held back at its cacheable ones while its copy is pending."""
        if rid in self.tails:
            return self.tails[rid]
        tail = self.held_tails.get(rid) if rid in self.pending_copy else None
        if tail is not None and self.align:
            self.count(COPIED)  # (read in an op that took copies only)
        return tail

    def _mtp(self, request) -> bool:
        return self._eagle(request) and align_eagle.held_back(self.trace) > 0
