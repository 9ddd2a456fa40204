"""EAGLE's last-block drop beside a Mamba "align" group with a KV connector (since 2026-12-07;
the "mamba connector" profile's EAGLE share, `strategies/kvmanager/mamba_eagle.drawn`): a mixin
ahead of `AlignExternal` that counts what the drop changes on the connector's path; the rules
themselves are the drop's (`align_eagle.py`) and the connector's (`align_external.py`), each
reading `Trace.eagle`. What vLLM 0.33.0 does, read in its source:

- with a KV connector `num_hash_lookahead_tokens` is 0 (legacy hashes), so `use_eagle`'s drop
  stays on: every group is flagged (`eagle_group_ids`, none flagged apart) and the Mamba
  manager's `drop_eagle_checkpoint_block` set, as without a connector;
- the connector's lookup (`get_computed_blocks_for_connector` ->
  `HybridKVCacheCoordinator.find_longest_cache_hit_per_group`): full attention looked up one
  drop unit past `num_tokens - 1` (`eagle_proof_margin`) and one unit dropped
  (`drop_eagle_block`), its blocks trimmed to cdiv(hit, b); the Mamba group with no margin and
  its finder never dropping (`MambaManager.find_longest_cache_hit` ignores the flag), so its
  own hit can lie deeper than full attention's after the drop: then the reconciled hit of
  `get_computed_blocks` (with the drop) and its boundary (`align_connector.expectation` with
  `eagle`); a hit the drop leaves inside a block is a partial local tail the scheduler drops
  for a longer load or keeps, as any;
- the scheduler's connector path (`Scheduler.schedule`'s waiting branch,
  `_update_waiting_for_remote_kv`) never reads `use_eagle`: the block-aligned local hit, the
  admission with `num_external_computed_tokens` (its Mamba count capped as without the drop,
  the external state's block at (c - 1) // b) and a load's delayed caching are the
  connector's rules; a step's checkpoint after the load moves to the drop's position
  (`get_mamba_prefill_checkpoint_position` with `drop_eagle_checkpoint_block`);
- a load reported done: `cache_blocks(request, c)`, whose cacheable tokens
  (`get_num_cacheable_tokens`) with the drop are c itself, not c cut to the scheduler block
  (k - 1 less with multi-module MTP: `align_external_mtp.py`); a failed one frees the request
  whole.

Multi-module MTP's held-back tokens (k >= 2, up to the hash unit) with a connector's ops: since
2026-12-07, `align_external_mtp.py` (its mixin, ahead of this one).
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import handles
from kvfuzz.fuzz.kvmanager import align_connector
from kvfuzz.fuzz.kvmanager.align_external import EVENTS as EXTERNAL, AlignExternal
from kvfuzz.fuzz.kvmanager.connector import LOADING
from kvfuzz.fuzz.kvmanager.connector_cap import lookup_cap
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING, WAITING
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded

CUT = "Mamba connector with EAGLE: the lookup's hit moved by the drop"
LOAD = "Mamba connector with EAGLE: an asynchronous load"
DONE = "Mamba connector with EAGLE: load done"
RESUMED = "Mamba connector with EAGLE: resumed after its load"
OWN = (CUT, LOAD, DONE, RESUMED)
EVENTS = (*EXTERNAL, *OWN)


class AlignExternalEagle(AlignExternal):
    """`AlignExternal` with the drop's events counted (mixed into `AlignLockstep` in its
    place)."""

    @handles(Connect)
    def connect(self, op: Connect):
        request = self.requests.get(op.rid)
        eagle = self._eagle(request) and request.status == WAITING and not request.computed
        if eagle and self.moved_by_drop(request, lookup_cap(op.max_hit, len(request.tokens))):
            self.count(CUT)
        problems = yield from super().connect(op)
        if eagle and request.status == LOADING:
            self.count(LOAD)
        return problems

    @handles(Loaded)
    def loaded(self, op: Loaded):
        request = self.requests.get(op.rid)
        loading = self._eagle(request) and request.status == LOADING
        problems = yield from super().loaded(op)
        if loading and op.valid < 0 and request.status == WAITING:
            self.count(DONE)
        return problems

    def _resume_loaded(self, rid, request, chunk: int, *padding):
        problems = yield from super()._resume_loaded(rid, request, chunk, *padding)
        if self._eagle(request) and request.status == RUNNING:
            self.count(RESUMED)
        return problems

    def _eagle(self, request) -> bool:
        return self.align and self.trace.eagle and request is not None

    def moved_by_drop(self, request, cap: int = -1) -> bool:
        """Whether the connector's lookup (capped at `cap`, -1: none) answers otherwise than it
        would without the drop (the pool's cache map before it)."""
        def answer(eagle: bool):
            return align_connector.request_expectation(self.trace, self.cache, request, eagle,
                                                       cap)
        return answer(True) != answer(False)
