"""How many free blocks vLLM 0.33.0's `KVCacheManager.allocate_slots` asks for a step of a
request beside a Mamba group in "align" mode with prefix caching (full attention and one Mamba
group of the same block size: the "mamba align" profile), and so whether it is made or refused.
Read in the released source, every branch the profile reaches:

- `allocate_slots` (kv_cache_manager.py ~480-590): the step's tokens `main` = its computed
  tokens (cut at `max_model_len`) plus its new ones, `slots` = min(main + lookahead, max len);
  the watermark (`int(watermark * num_blocks)`) added only for a waiting or preempted request
  while others are scheduled; with `full_sequence_must_fit` first the whole sequence
  (min(num_tokens, max len), no lookahead) counted against the free blocks as they are; then
  the skipped blocks freed (`remove_skipped_blocks`: the Mamba states below the one of the
  last computed token go back to the pool, `freed`), and the step counted against the free
  blocks then, less `reserved_blocks`. Refused (None) where a count plus the watermark passes
  its free blocks.
- the coordinator sums its groups' counts (`get_num_blocks_to_allocate`); `prefill_end` is 0
  unless the retention interval is 0.
- full attention (`SingleTypeKVCacheManager.get_num_blocks_to_allocate`, nothing skipped):
  cdiv(slots, b) less the hit's blocks and the table's, at least 0; plus the hit's blocks with
  no reference (evictable: taking them off the free queue costs a free block); plus one where
  the hit ends inside a block (the copy-on-write block). A running request's fast path
  (`num_cached_block`) gives the same number: it has no hit.
- the Mamba group (`MambaManager.get_num_blocks_to_allocate`, align branch, ~1740-1795):
  cdiv(main, b) + its speculative blocks, less the hit's blocks and the table's (lookahead takes
  no Mamba block; the difference may be negative, and is summed so); where the hit ends inside
  a block or the request's previous step keyed its own partial tail (`_partial_hit_reqs`),
  at least 0 and one more; where positive, capped at `physical_block_cap` = 1 + that copy +
  a prefill checkpoint block (`_needs_internal_checkpoint`) + the speculative blocks for a
  request that has not been allocated blocks since its admission; plus the hit's evictable
  blocks (not null, no reference).
- the group answers `num_gpu_blocks + 1` where its hit's state was cached in the same step
  (`cached_blocks_this_step`); the lock step starts a step before every op and an admission is
  its op's first allocation, so no hit is ever that young there (`align_refusal.py`), and it is
  not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.oracle.kvmanager.mamba_align import checkpoint_index


@dataclass(frozen=True)
class Engine:
    """The settings a count reads: the block size (both groups') and hash block, the maximum
    model length, lookahead slots, the Mamba group's speculative blocks and checkpoint
    alignment (0: no checkpoint blocks), whether the retention interval is 0, the watermark's
    blocks."""
    block_size: int
    hash_size: int
    max_model_len: int
    lookahead: int = 0
    speculative: int = 0
    checkpoint: int = 0
    retention_zero: bool = False
    watermark: int = 0
    hash_lookahead: int = 0  # the pool's lookahead hashing (moves the checkpoint back)
    eagle: bool = False  # EAGLE's drop (moves the checkpoint to its replay boundary)


@dataclass(frozen=True)
class Step:
    """One `allocate_slots` as the caller makes it and the pool shows it before: the request's
    computed tokens, the hit adopted (`hit` tokens, each group's hit blocks, 0 the null block),
    external tokens, new tokens, its tokens and prompt; its tables before the op (full
    attention's length, the Mamba group's block ids); each block's reference count; whether
    its previous step keyed its own partial tail (a copy-on-write pending), whether it was
    allocated blocks since its admission; an admission's watermark and whole-sequence check,
    the blocks it leaves free (`reserved_blocks`, a connector's load)."""
    computed: int
    new: int
    tokens: int
    prompt: int
    hit: int = 0
    full_hit: tuple = ()
    mamba_hit: tuple = ()
    external: int = 0
    full_table: int = 0
    mamba_table: tuple = ()
    pending_copy: bool = False
    allocated: bool = False
    watermark: bool = False
    whole: bool = False
    reserved: int = 0
    lookahead: bool = True  # whether the caller asks the lookahead slots (a load does not)
    in_flight: int = 0  # its tokens in flight (asynchronous scheduling): not freed on


def evictable(blocks, ref) -> int:
    """The hit's blocks that leave the free queue when adopted (`_get_num_evictable_blocks`)."""
    return sum(1 for block in blocks if block and ref[block] == 0)


def full_count(engine: Engine, slots: int, hit_blocks, table: int, local: int, ref) -> int:
    """Full attention's count for `slots` token slots."""
    count = max(cdiv(slots, engine.block_size) - len(hit_blocks) - table, 0)
    partial = bool(hit_blocks) and local % engine.block_size != 0
    return count + evictable(hit_blocks, ref) + partial


def mamba_count(engine: Engine, step: Step, start: int, main: int, table, ref) -> int:
    """The Mamba group's count for a step computing tokens [start, main) (`table`: its Mamba
    table at the count, after the skipped states were freed)."""
    size, spec = engine.block_size, engine.speculative
    count = cdiv(main, size) + spec - len(step.mamba_hit) - len(table)
    partial = (bool(step.mamba_hit) and (step.computed + step.hit) % size != 0) \
        or step.pending_copy
    if partial:
        count = max(count, 0) + 1
    prefill_end = max(step.prompt, step.tokens - 1) if engine.retention_zero else 0
    index = checkpoint_index(start, main, prefill_end, size, engine.hash_size,
                             engine.checkpoint, engine.hash_lookahead, engine.eagle)
    if index is not None and not (index >= len(table) or not table[index] or (
            step.allocated and index >= len(table) - spec)):
        index = None
    if count > 0:
        cap = 1 + partial + (index is not None) + (0 if step.allocated else spec)
        count = min(count, cap)
    return count + evictable(step.mamba_hit, ref)


def freed(engine: Engine, step: Step, ref) -> tuple[tuple, int]:
    """What `remove_skipped_blocks` does before the step's count: the Mamba states below the
    one of its last processed token (`get_num_skipped_tokens` = p - 1; p its computed tokens
    less those in flight, `allocate_slots`' `max(0, total - num_in_flight_tokens)`) nulled in
    its table, and how many of them join the free queue (no other table holds them)."""
    processed = max(0, min(step.computed + step.hit + step.external, engine.max_model_len)
                    - step.in_flight)
    below = (processed - 1) // engine.block_size if processed > 0 else 0
    table = list(step.mamba_table)
    back = 0
    for index in range(min(below, len(table))):
        if table[index]:
            back += ref[table[index]] == 1
            table[index] = 0
    return tuple(table), back


def counts(engine: Engine, step: Step, free: int, ref) -> tuple[int | None, int, int]:
    """The whole sequence's count (None: not asked), the step's count and the free blocks it is
    held against (`free`: the pool's free blocks before the op; `ref`: each block's reference
    count before it)."""
    top = engine.max_model_len
    local = step.computed + step.hit
    total = min(local + step.external, top)
    whole = None
    if step.whole:
        tokens = min(step.tokens, top)
        whole = full_count(engine, tokens, step.full_hit, step.full_table, local, ref) + \
            mamba_count(engine, step, total, tokens, step.mamba_table, ref)
    table, back = freed(engine, step, ref)
    main = total + step.new
    slots = min(main + (engine.lookahead if step.lookahead else 0), top)
    count = full_count(engine, slots, step.full_hit, step.full_table, local, ref) + \
        mamba_count(engine, step, local + step.external, main, table, ref)
    return whole, count, free + back - step.reserved


def fits(engine: Engine, step: Step, free: int, ref) -> tuple[bool, str]:
    """Whether the released counts let the step through, and the figures that say so."""
    whole, count, available = counts(engine, step, free, ref)
    watermark = engine.watermark if step.watermark else 0
    if whole is not None and whole + watermark > free:
        return False, (f"the whole sequence's count {whole} + watermark {watermark} > "
                       f"{free} free")
    made = count + watermark <= available
    return made, (f"count {count} + watermark {watermark} {'<=' if made else '>'} {available} "
                  f"free{f' (whole sequence {whole})' if whole is not None else ''}")
