"""Which blocks, beside a Mamba "align" group: the free queue's order and the blocks each pool
call takes, as vLLM 0.33.0's `BlockPool` makes them (`vllm/v1/core/block_pool.py`, facts only),
from the queue, reference counts and entries read before an op. Pure: the reduced mode
(`fuzz/kvmanager/align_queue.py`) says which calls an op made, in the release's order.

- `free_blocks(blocks)`: one reference fewer per block (the null block skipped); those left
  with none go back in one batch each way, in the order given: uncached ones (no entry at the
  time of the free) prepended to the head (`prepend_n`: the first given ends first, reused
  first), cached ones appended to the tail (`append_n`, evicted least recently used first).
- `get_new_blocks(n)`: the first n blocks of the queue (`popleft_n`); a cached one loses its
  entries (evicted); each gets one reference.
- `touch(blocks)`: one reference more each; a block with none leaves the queue wherever it is.
"""

from __future__ import annotations

from kvfuzz.oracle.blockpool.model import released


class QueueModel:
    """The free queue head first, each block's references and whether it is cached."""

    def __init__(self, queue: list[int], ref: list[int], cached) -> None:
        self.queue = list(queue)
        self.ref = list(ref)
        self.cached = cached      # block -> whether it holds a cache entry when freed
        self.evicted: list[int] = []  # cached blocks popped, in pop order

    def free(self, blocks) -> None:
        self.queue = released(self.queue, self.ref, blocks, self.cached)

    def touch(self, blocks) -> None:
        for block in blocks:
            if not block:
                continue
            if self.ref[block] == 0 and block in self.queue:
                self.queue.remove(block)
            self.ref[block] += 1

    def pop(self, count: int) -> list[int]:
        taken, self.queue = self.queue[:count], self.queue[count:]
        for block in taken:
            if self.cached(block):
                self.evicted.append(block)
            self.ref[block] = 1
        return taken

    def hold(self, block: int) -> None:
        """One reference more on a held block (a copy-on-write endpoint kept for the copy)."""
        if block:
            self.ref[block] += 1


def trim_null_head(table: list[int]) -> list[int]:
    """A table without its leading null blocks (`trim_null_head`: what `free` gives back)."""
    start = next((i for i, block in enumerate(table) if block), len(table))
    return list(table[start:])


def request_free(model: QueueModel, tables: list[list[int]], order: list[int]) -> None:
    """`KVCacheManager.free(request)`: the coordinator frees each group in its order (`order`:
    the trace's group ids in the manager's order), one `free_blocks` call each, the table
    without its leading nulls, last block first."""
    for group in order:
        if group < len(tables):
            model.free(reversed(trim_null_head(tables[group])))


def skipped_frees(before: list[int], after: list[int], speculative: int) -> list[int]:
    """The states `MambaManager.remove_skipped_blocks` freed, in the order it frees them: the
    blocks of the table before the op whose position is null (or another block) after it, last
    position first (`_remove_blocks_in_range` walks the range backwards, one `free_blocks`
    call). The `speculative` scratch blocks at the table's end are never in that range (the
    range ends below the last state's position): a scratch block's position nulled by the
    op was relocated to the end (`_relocate_speculative_block`), not freed. (The separate
    `last_state_block_idx` free frees nothing the range has not: its index is below
    cdiv(p, b) - 1 = the range's end, and every index below the range's start was nulled by an
    earlier call, as no hit, relocation or extension writes a block there.)"""
    end = max(0, len(before) - speculative)
    return [before[i] for i in range(end - 1, -1, -1)
            if before[i] and (i >= len(after) or after[i] != before[i])]
