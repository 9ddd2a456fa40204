"""Mamba's shared-prefix checkpoint beside an "align" group (`Trace.mamba_shared_prefix`, vLLM's
`CacheConfig.enable_mamba_shared_prefix_checkpoint`), in the reduced mode (`align.py`). The codec
takes it only where vLLM 0.33.0's manager turns it on (kv_cache_manager.py 188-198: EAGLE's
groups, partial hash hits, no MTP tokens re-prefilled), which then sets the Mamba manager's
`shared_prefix_checkpoint`. What it changes, read in the release and modelled here:

- the scheduler (`_mamba_block_aligned_split`, scheduler.py 632-659) ends a prefill chunk at the
  junction, `request.shared_prefix_boundary` (the last lookup's third value), itself rather than
  the block boundary below it, where the junction is inside the chunk and within the prompt
  (`chunk`; the reduced mode's other chunks stay as drawn: its checks accept any chunk);
- the manager (`MambaManager._cache_partial_tail_block`, single_type_kv_cache_manager.py
  2091-2104) then keys the state a step ending there writes under the request's hash of the
  junction's tokens in the Mamba group (group 1): a partial entry on the step's last block
  where the junction is inside a block (a copy-on-write pending, as for the prompt's tail), the
  block's own key where it ends one. Judged after such a step (`step_problem`): a prefill step
  (it started below the junction) to exactly the junction, within the prompt, that took no
  prefill checkpoint block (the manager's checkpoint branch returns before the junction's).

And, with the setting or without it, what retention 0 keeps of a junction
(`SingleTypeKVCacheManager.cache_blocks`, lines 505-520, adds `request.shared_prefix_boundary`,
and with the manager's `use_eagle`, which EAGLE's drop sets on every group here, the boundary a
block lower, to the reachable boundaries; `MambaManager.reachable_block_mask` keeps the state
block ending at each cut to the hit alignment, the hash block, then to the block): a step that
ends exactly there (from below) must leave that state cached under the request's hash of its
tokens in the Mamba group (`retention_problem`; under lookahead hashing not judged, as the
replay state's rule). Past the prompt (a resumed request) the scheduler stops at the block
boundary below the junction (taken as drawn, as its other stops) and the manager keys nothing:
nothing more to judge (docs). The hit a sibling takes from the junction's entry
is judged by the hit's own check (`align_hits.py`: the hybrid fixed point over the pool's
entries), and the copy-on-write it pends by the pool's and the exact counts' checks.
"""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager import align_eagle

CUT = "shared-prefix checkpoint: a chunk cut at the junction"
KEYED = "shared-prefix checkpoint: the junction's state keyed"
KEPT = "sparse retention: a shared-prefix junction's state kept"
EVENTS = (CUT, KEYED, KEPT)


def chunk(trace, request, start: int, new: int) -> int:
    """A prefill chunk of `new` tokens from `start` as vLLM's scheduler stops it at the junction
    (`request.boundary`) with the setting on; else `new`."""
    junction = request.boundary
    if trace.mamba_shared_prefix and start < junction < start + new and \
            junction <= request.prompt:
        return junction - start
    return new


def step_problem(trace, request, read_from: int, checkpoint: bool, mamba_table: list, entries
                 ) -> tuple[bool, str | None]:
    """After a step of `request` from `read_from` computed tokens (`checkpoint`: whether it took
    a prefill checkpoint block; `mamba_table`: its Mamba table after it; `entries(block)`: that
    block's cache entries): (whether it wrote the junction's state, what is wrong or None)."""
    junction, size, hashed = request.boundary, trace.block_size, trace.hash_size
    if not (trace.mamba_shared_prefix and junction and request.computed == junction and
            read_from < junction <= request.prompt and junction % hashed == 0) or checkpoint:
        return False, None
    index = (junction - 1) // size
    block, keyed = _state_keyed(trace, request, junction, index, mamba_table, entries)
    if keyed:
        return True, None
    return True, (f"a prefill step from {read_from} to the shared-prefix junction "
                  f"{junction} (of a {request.prompt}-token prompt) wrote its state to block "
                  f"{block} (column {index}), and with the shared-prefix checkpoint on it is "
                  f"not cached under the request's hash of {junction} tokens in the Mamba "
                  f"group: a sibling resuming at the junction would not find it")


def retained_ends(trace, junction: int) -> set[int]:
    """The tokens whose states retention 0 keeps for a shared-prefix `junction`: it and, with
    EAGLE's drop, a block below it, each cut to the hash block, then to the block (> 0)."""
    size, hashed = trace.block_size, trace.hash_size
    bounds = (junction, junction - size) if trace.eagle else (junction,)
    return {end for bound in bounds if (end := bound // hashed * hashed // size * size) > 0}


def retention_problem(trace, request, read_from: int, mamba_table: list, entries
                      ) -> tuple[bool, str | None]:
    """After a step of `request` from `read_from` computed tokens under retention 0: (whether
    it wrote a state retention keeps for its junction, what is wrong or None)."""
    end, size = request.computed, trace.block_size
    if trace.retention != 0 or trace.hash_lookahead or not request.boundary:
        return False, None
    if align_eagle.held_back(trace):  # (cached once finalized: `align_eagle.finalized_end`)
        end = align_eagle.finalized_end(trace, read_from, end, retained_ends(
            trace, request.boundary))
        if end is None:
            return False, None
    elif read_from >= end or end not in retained_ends(trace, request.boundary):
        return False, None
    index = end // size - 1
    block, keyed = _state_keyed(trace, request, end, index, mamba_table, entries)
    if keyed:
        return True, None
    return True, (f"a step from {read_from} to {end} tokens wrote the state retention 0 keeps "
                  f"for the shared-prefix junction {request.boundary} (block {block}, column "
                  f"{index}), and it is not cached under the request's hash of {end} tokens "
                  f"in the Mamba group: a sibling resuming there would not find it")


class AlignSharedPrefix:
    """The reduced mode's part (mixed into `AlignLockstep`)."""

    def junction_cut(self, request, start: int, new: int) -> int:
        cut = chunk(self.trace, request, start, new)
        if cut != new:
            self.count(CUT)
        return cut

    def junction_problems(self, rid, request) -> list[tuple[str, str]]:
        written, wrong = step_problem(self.trace, request, self.read_from.get(rid, 0),
                                      rid in self.checkpoints, self.mamba_tables.get(rid, []),
                                      self._entries)
        if written and not wrong:
            self.count(KEYED)
        kept, lost = retention_problem(self.trace, request, self.read_from.get(rid, 0),
                                       self.mamba_tables.get(rid, []), self._entries)
        if kept and not lost:
            self.count(KEPT)
        return [("shared-prefix checkpoint", f"r{rid}: {wrong}")] * bool(wrong) + \
            [("retention", f"r{rid}: {lost}")] * bool(lost)


def _state_keyed(trace, request, end: int, index: int, mamba_table: list, entries
                 ) -> tuple[int, bool]:
    """The block at column `index` of the request's Mamba table, and whether it is cached
    under the request's hash of its first `end` tokens in the Mamba group (group 1)."""
    block = mamba_table[index] if index < len(mamba_table) else 0
    key = (request.hashes(trace.hash_size, trace.hash_lookahead)[end // trace.hash_size - 1], 1)
    return block, bool(block) and key in entries(block)
