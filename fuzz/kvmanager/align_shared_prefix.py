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

What retention 0 keeps of the junction (`reachable_block_mask`: the state block ending at or
below it) does not depend on the setting and is not judged here; nor the junction past the
prompt (the scheduler's block-floored stop). The hit a sibling takes from the junction's entry
is judged by the hit's own check (`align_hits.py`: the hybrid fixed point over the pool's
entries), and the copy-on-write it pends by the pool's and the exact counts' checks.
"""

from __future__ import annotations

CUT = "shared-prefix checkpoint: a chunk cut at the junction"
KEYED = "shared-prefix checkpoint: the junction's state keyed"
EVENTS = (CUT, KEYED)


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
    block = mamba_table[index] if index < len(mamba_table) else 0
    key = (request.hashes(hashed, trace.hash_lookahead)[junction // hashed - 1], 1)
    if block and key in entries(block):
        return True, None
    return True, (f"a prefill step from {read_from} to the shared-prefix junction "
                  f"{junction} (of a {request.prompt}-token prompt) wrote its state to block "
                  f"{block} (column {index}), and with the shared-prefix checkpoint on it is "
                  f"not cached under the request's hash of {junction} tokens in the Mamba "
                  f"group: a sibling resuming at the junction would not find it")


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
        return [("shared-prefix checkpoint", f"r{rid}: {wrong}")] if wrong else []
