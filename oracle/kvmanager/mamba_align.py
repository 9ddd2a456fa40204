"""Which blocks a Mamba group in "align" mode keeps, per request and step (vllm 0.33.0,
`MambaManager` in `single_type_kv_cache_manager.py`, as the "mamba align" profile builds it).
Facts read in the released source:

- a step of a request that had computed `c` tokens first frees the states before the one of
  its last computed token (`get_num_skipped_tokens` = c - 1: every block below (c - 1) // b
  leaves the table, a null in its place, `_remove_blocks_in_range`'s align branch);
- it then pads the table with nulls and takes ONE new block, the state of its new last token:
  the table is cdiv(c', b) long (c' = c + the step's tokens; lookahead tokens take no Mamba
  block in this mode) and its last block is that state;
- so between steps a request holds at most two states: the one its last step read (block
  (c - 1) // b, where the copy came from) and the one it wrote (the last block); a partial hit's
  copy-on-write block takes the read state's place (`_apply_cow`), or is handed to the pool
  (`move_block_hashes`) and is in no table. The read one MAY stay, it need not: the worker's
  next step reads the one written (`worker_columns` below), and the next allocation, refused
  or not, frees the read one. What must hold is the state a step reads at that step
  (`read_problems`).

- with a prefill checkpoint block (`MambaSpec.num_prefill_checkpoint_blocks` 1, the trace's
  `mamba_checkpoint` its `prefill_checkpoint_alignment`), a step that reaches past a valid
  checkpoint (`checkpoint_index`) takes one more block, at table position cdiv(c', b) - 2, the
  state its chunk exports at the checkpoint: three states then, freed with the read one at the
  request's next step (or its next refused one, which frees all but the last).
- with `s` speculative blocks (`num_speculative_blocks`, multi-token prediction's draft
  tokens) the table is `s` blocks longer and the `s` past the written state are scratch blocks,
  never null: a step moving blocks on turns the first of them into its state (or its
  checkpoint) and relocates the rest to the end (`_relocate_speculative_block`).

- under asynchronous scheduling (tokens in flight: `KVCacheManager.allocate_slots` frees on the
  processed count, `max(0, c - num_in_flight_tokens)`, kv_cache_manager.py ~563-567) a step frees
  only the states below the one of the last PROCESSED token, p: every block below (p - 1) // b,
  and `last_state_block_idx` only where it is below that too (its `cdiv(p, b) - 1` is the same
  bound). So a request keeps the state its oldest step in flight reads ((p - 1) // b), what
  every step in flight writes (and a checkpoint one took), and its last step's: `flight_positions`.

A hit is the state of its last token: the block at (hit - 1) // b, cached under the request's
hash of the first `hit` tokens in the Mamba group (group 1), a partial entry where the hit ends
inside the block.
"""

from __future__ import annotations

from kvfuzz.oracle.kvmanager.hybrid import cdiv


def checkpoint_position(end: int, hash_size: int, lookahead: int = 0, eagle: bool = False) -> int:
    """Where a chunk ending at `end` tokens exports its checkpoint: the last hash boundary that
    leaves a token to recompute and, under lookahead hashing (`lookahead`, the pool's
    `num_hash_lookahead_tokens`), the tokens its hash covers past it: `end - max(1, lookahead)`
    cut to the hash grid (`get_mamba_prefill_checkpoint_position`; the manager's alignment is
    the hash block in this profile). With EAGLE (`eagle`: the coordinator sets the manager's
    `drop_eagle_checkpoint_block`) the checkpoint follows EAGLE's replay boundary instead: `end`
    cut to the grid less one hash block, no token held back (the drop leaves tokens to
    recompute)."""
    if eagle:
        return max(end // hash_size * hash_size - hash_size, 0)
    return max((end - max(1, lookahead)) // hash_size * hash_size, 0)


def checkpoint_index(start: int, end: int, prefill_end: int, block_size: int, hash_size: int,
                     alignment: int, lookahead: int = 0, eagle: bool = False) -> int | None:
    """The table position of the checkpoint block a step computing tokens [start, end) takes, or
    None (`_needs_internal_checkpoint` with `is_mamba_prefill_checkpoint_valid`). `alignment`:
    the spec's `prefill_checkpoint_alignment` (0: no checkpoint blocks); `prefill_end`: the
    prompt's end (past its output tokens but one), or 0 where retention is not 0 (the
    coordinator then passes 0: every chunk may export one); `eagle`: EAGLE's drop
    (`checkpoint_position`). The table's length before the step,
    cdiv(start, b), is always at most the index here, so that clause always holds."""
    position = checkpoint_position(end, hash_size, lookahead, eagle)
    index = cdiv(end, block_size) - 2
    valid = (start % hash_size == 0 and index > (start - 1) // block_size
             and start + hash_size <= position and start < position < end
             and (position - start) % alignment == 0) if alignment else False
    return index if valid and end >= prefill_end and index >= 0 else None


def kept_positions(read_from: int, computed: int, block_size: int,
                   checkpoint: int | None = None, speculative: int = 0) -> set[int]:
    """The table positions that may hold a state after a step from `read_from` computed tokens
    to `computed`: the state read (none for a step from 0), the state written, the
    `speculative` scratch blocks past it and the step's checkpoint, if it took one."""
    written = cdiv(computed, block_size) - 1
    kept = set(range(written, written + 1 + speculative))
    if read_from > 0:
        kept.add((read_from - 1) // block_size)
    if checkpoint is not None:
        kept.add(checkpoint)
    return kept


def flight_positions(processed: int, steps, block_size: int) -> frozenset[int]:
    """The table positions a step's allocation keeps beside its own (`kept_positions`) under
    asynchronous scheduling: the state of the last processed token (`processed` = the computed
    tokens less those in flight when the step was allocated; none at 0) and, of each step still
    in flight then (`steps`: (start, end, checkpoint position or None)), the state it writes and
    its checkpoint."""
    kept = {(processed - 1) // block_size} if processed > 0 else set()
    for _start, end, checkpoint in steps:
        kept.add(cdiv(end, block_size) - 1)
        if checkpoint is not None:
            kept.add(checkpoint)
    return frozenset(kept)


def table_problems(table: list[int], read_from: int, computed: int, block_size: int,
                   checkpoint: int | None = None, speculative: int = 0,
                   in_flight: frozenset[int] = frozenset()) -> str | None:
    """What is wrong with a live request's Mamba table (block ids, 0 the null block) after its
    last step went from `read_from` to `computed` tokens (taking a checkpoint block at position
    `checkpoint`, or None), with `speculative` scratch blocks, and the positions the steps
    in flight at it keep (`flight_positions`); None when nothing."""
    length = cdiv(computed, block_size) + speculative
    if len(table) != length:
        return (f"{len(table)} blocks after {computed} computed tokens in blocks of "
                f"{block_size}{f' and {speculative} speculative' if speculative else ''}: "
                f"expected {length}")
    if not table[length - 1 - speculative]:
        return f"its block of the state of token {computed - 1} is the null block" \
            if speculative else \
            f"its last block (the state of token {computed - 1}) is the null block"
    if not all(table[length - speculative:]):
        return f"one of its {speculative} speculative blocks is the null block"
    if checkpoint is not None and not table[checkpoint]:
        return (f"holds no checkpoint block at position {checkpoint} after a step from "
                f"{read_from} to {computed} tokens past a valid prefill checkpoint")
    kept = kept_positions(read_from, computed, block_size, checkpoint, speculative) | in_flight
    stale = [index for index, block in enumerate(table) if block and index not in kept]
    if stale:
        return (f"holds states at positions {stale[:4]} after a step from {read_from} to "
                f"{computed} tokens: expected only positions {sorted(kept)} (the state read, "
                f"the state written and a prefill checkpoint's"
                f"{', and those of the steps in flight' if in_flight else ''})")
    return None


def hit_key(hashes: list[int], hit: int, hash_size: int) -> tuple[int, int]:
    """The Mamba group's cache key (hash, group 1) of a hit of `hit` tokens: the request's hash
    of its last hash unit (`hashes` per `hash_size` tokens)."""
    return hashes[hit // hash_size - 1], 1


# -- what the worker reads and writes at a step (vllm 0.33.0, `v1/worker/mamba_utils.py`) ------
# `preprocess_mamba` (lines 1446-1549), before the forward: a request new to the worker (admitted,
# resumed, or first scheduled after a KV load: `cleanup_mamba_state_idx` dropped any index it had)
# reads column (num_computed_tokens - 1) // b (line 1492-1495; none at 0 tokens); a running one
# the column its last step wrote (`mamba_state_idx`, line 1512), plus its accepted drafts' offset
# into the speculative columns (`get_temporal_copy_spec`, `model_executor/layers/mamba/
# mamba_utils.py:390`). It copies that state into column cdiv(c', b) - 1 (c' = the computed
# tokens plus the step's, line 1497-1511), from which the kernel starts (`mamba_get_block_table_
# tensor`, `v1/attention/backends/utils.py:1283`: column (seq_len - 1) // b and the `s` after it).
# Its block ids are its own copy of the table (`gpu_model_runner._update_states`, lines 1420-1432):
# the scheduler's whole table when the request is new or resumed, else the last copy with the
# step's new blocks appended. The nulls `remove_skipped_blocks` and `_relocate_speculative_block`
# put in the scheduler's table never reach it, so a block the scheduler frees under a column the
# worker still reads is read freed (and zeroed or overwritten once another request gets it).


def worker_columns(start: int, end: int, block_size: int, last_written: int | None
                   ) -> tuple[int | None, int]:
    """(the column a step from `start` to `end` computed tokens reads its state from, or None
    for a step from 0; the column it writes): `last_written` is the column the request's last
    step wrote while it stayed in the worker's batch, None when it is new to the worker."""
    read = last_written if last_written is not None else \
        ((start - 1) // block_size if start > 0 else None)
    return read, cdiv(end, block_size) - 1


def read_problems(worker: list[int], table: list[int], read: int | None, written: int,
                  speculative: int = 0, checkpoint: int | None = None) -> str | None:
    """What is wrong with a step's reads and writes (`worker_columns`) given the worker's copy
    of the Mamba table (`worker`) and the scheduler's table after the step's allocation
    (`table`); None when nothing. The state read (and, after draft tokens, the speculative
    columns past it, one of which holds the last accepted token's state) must be a block the
    request still holds: not null, not freed; the state written, its speculative columns and a
    prefill checkpoint's the scheduler's own blocks at those columns."""
    held = {block for block in table if block}
    if read is not None:
        if read >= len(worker) or not worker[read]:
            return (f"the worker's step reads its state from column {read}, which holds no "
                    f"block (its copy of the table: {worker})")
        gone = [worker[column] for column in range(read, min(read + 1 + speculative,
                                                             len(worker)))
                if worker[column] and worker[column] not in held]
        if gone:
            return (f"the worker's step reads its state from column {read} (its copy of the "
                    f"table {worker}); blocks {gone} there are no longer the request's "
                    f"(scheduler's table {table}): freed before the worker read them")
    columns = list(range(written, written + 1 + speculative)) + \
        ([checkpoint] if checkpoint is not None else [])
    wrong = [column for column in columns
             if column >= len(worker) or column >= len(table) or not table[column]
             or worker[column] != table[column]]
    if wrong:
        return (f"the worker's step writes columns {columns} of its copy {worker}; at "
                f"{wrong} the scheduler's table {table} holds another block or none")
    return None
