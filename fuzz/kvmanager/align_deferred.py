"""The reduced Mamba "align" mode's model (`align.py`) and its deferred frees: under a KV
consumer connector with a step in flight (vLLM 0.33.0 sets `defer_block_free` for overlapping
batches, scheduler.py 189-195) a finish frees nothing yet: `_free_request_blocks` (3086-3093)
pops the request's tables (`pop_blocks_for_free`: each group's blocks in table order past its
leading nulls, `trim_null_head`; the Mamba group's inner nulls kept) and the scheduler returns
them to the pool, last first, once the fencing step is processed (`_drain_deferred_frees`: the
trace's `release`). A finish with tokens in flight (`flight_finish.py`) is one: an abort
between a step's scheduling and its output.

The model answers the shared free handler (`free_ops.py`): a free with nothing (the pool's state
after it is read and checked instead), a deferred free with the tables the lock step read just
before the finish (`block_ids`, read for the finish's tail: `align.free`), a `release` with
nothing (the pool checked after it). A deferred preemption's tables are read before it too."""

from __future__ import annotations


class Unmodelled:
    """The reduced mode's model: nothing asks it but the frees (`free_ops.py`)."""

    def __init__(self, order=(0, 1)) -> None:
        self.order = order  # the trace's group ids in the manager's order (`align_queue`)
        self.read: dict[int, list] = {}  # rid -> its tables read before its finish
        # the deferred frees, oldest first: (rid, the blocks popped, held until released)
        self.deferred: list[tuple[int, list]] = []
        self.released: list = []  # the blocks the last `release` freed

    def free(self, rid: int) -> None:
        self.read.pop(rid, None)
        return None

    def pop_blocks_for_free(self, rid: int):
        tables, popped = self.read.pop(rid, []), []
        for table in (tables[g] for g in self.order if g < len(tables)):
            # (group after group in the manager's order, each past its leading nulls)
            lead = next((i for i, b in enumerate(table) if b), len(table))
            popped += list(table[lead:])
        if popped:  # (the scheduler keeps a non-empty list only)
            self.deferred.append((rid, popped))
        return popped

    def deferring(self, rid: int) -> bool:
        return any(owner == rid for owner, _ in self.deferred)

    def release(self, rid: int) -> None:
        """The oldest deferred free of `rid` done (`released`: its blocks, for the free
        queue's prediction, `align_queue.py`: one `free_blocks` call, last popped first)."""
        index = next(i for i, (owner, _) in enumerate(self.deferred) if owner == rid)
        self.released = self.deferred.pop(index)[1]
        return None

    def popped(self) -> list:
        """The blocks popped by deferred frees not yet released (each a reference held)."""
        return [block for _, blocks in self.deferred for block in blocks if block]
