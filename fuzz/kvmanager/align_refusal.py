"""A refusal the reduced mode of Mamba "align" can judge (`align.py`): a running request's step
that needs no new block in either group must not be refused, however full the pool is. The
reduced mode judges no other refusal (it does not model how many blocks a step needs); this
one needs only the tables the caller already holds:

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
