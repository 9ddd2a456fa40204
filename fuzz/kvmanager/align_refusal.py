"""Bounds on the refusals of the reduced mode of Mamba "align" (`align.py`), from before it
judged every allocation exactly (`align_count.py`, since 2026-12-06; these still run beside it):
a running request's step that needs no new block in either group must not be refused, however
full the pool is; this needs only the tables the caller already holds:

- full attention needs a new block only past `len(table) * block_size` slots (the step's
  tokens and its lookahead slots);
- the Mamba group's step needs none while `cdiv(computed + new, block_size)` (its main-model
  tokens; align mode ignores lookahead) plus its speculative blocks is within its table,
  unless a copy-on-write is pending: the request's previous step keyed its own partial tail
  (vLLM's `_partial_hit_reqs`), which the next step copies into a fresh block. That is seen as
  the previous step having changed a cache key on a block of the request's Mamba table
  (`rekeyed`; a prefill checkpoint's block left out: no copy is pending for it), and such a
  step is not judged. (A step that stays within its table never takes a checkpoint block:
  the checkpoint's column lies past the state it reads.)

Caught: vLLM's `MambaManager.get_num_blocks_to_allocate` adding the table's length for
subtracting it (`kvfuzz mutate`'s line 1746), which counts a block for a step that needs none.

And an admission (`needless_admission_refusal`) is never refused while the pool's free blocks
cover a bound on anything it can count. The Mamba group defers a hit on a state cached *in the
current step* (it answers `num_gpu_blocks + 1`, "put it in the next step"), and forgets those
states when the next step starts (`new_step_starts`, through the coordinator); in kvfuzz's lock
step every op is a step, and an admission is its op's first allocation, so the state a hit
adopts was always cached by an earlier step, and that deferral never applies. The bound, per
vLLM 0.33.0's counts (`get_num_blocks_to_allocate`): full attention at most cdiv(T, block) + 1
(the table for T tokens, the hit's evictable blocks inside it, a partial hit's copy), the Mamba
group in align mode at most 1 + 1 + 1 + its speculative blocks (a state, a partial hit's copy,
a prefill checkpoint) + 1 (the hit's one evictable state), and the watermark; T the most tokens
either count covers (the whole sequence, or the step's tokens with the lookahead slots). Caught:
the coordinator's `new_step_starts` not passed on to its managers (`kvfuzz mutate`'s line 477 of
`kv_cache_coordinator.py`): every state once cached stays "this step's", and an admission that
adopts one is refused for good, however empty the pool.
"""

from __future__ import annotations

from kvfuzz.oracle.kvmanager.hybrid import cdiv


def needless_refusal(block_size: int, lookahead: int, computed: int, new: int,
                     lengths: tuple[int, int] | None, rekeyed: bool,
                     speculative: int = 0) -> str | None:
    """Why refusing this running request's step is wrong, or None where a refusal may be right
    (`lengths`: its full-attention and Mamba tables' lengths before the step; None: unknown)."""
    if lengths is None or rekeyed or new <= 0:
        return None
    full, mamba = lengths
    if cdiv(computed + new + lookahead, block_size) > full or \
            cdiv(computed + new, block_size) + speculative > mamba:
        return None
    return (f"allocate_slots refused a step of {new} tokens after {computed} that needs no new "
            f"block (tables of {full} and {mamba} blocks of {block_size}, {lookahead} lookahead "
            f"slots)")


def rekeyed(before: list, after: list, table: list[int]) -> bool:
    """Whether any block of `table` (a Mamba table after a step) has other cache keys in
    `after` than in `before` (the pool's keys read after the step and before it)."""
    return any(not 0 < block < min(len(before), len(after)) or before[block] != after[block]
               for block in table if block)


def needless_admission_refusal(block_size: int, tokens: int, lookahead: int, speculative: int,
                               watermark_blocks: int, free: int) -> str | None:
    """Why refusing this admission is wrong (`tokens`: the most tokens either of its counts
    covers, before the lookahead slots; `free`: the pool's free blocks before the op), or None
    where the pool may be too small for it."""
    bound = cdiv(tokens + lookahead, block_size) + 1 + 4 + speculative + watermark_blocks
    if free < bound:
        return None
    return (f"allocate_slots refused an admission of at most {tokens} tokens (+{lookahead} "
            f"lookahead) with {free} free blocks of {block_size}, at least {bound} needed by no "
            f"count (a hit on a state cached in an earlier step is not deferred)")
