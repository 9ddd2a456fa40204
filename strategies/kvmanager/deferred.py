"""The "deferred frees" profile (`kvmanager/5[deferred frees]`): the "connector" profile's
scheduler with overlapping batches (asynchronous scheduling or pipeline parallelism) and a
consumer connector, where vLLM 0.33.0's scheduler defers freeing a request's blocks while a
step in flight may still write them (`Scheduler.defer_block_free`, `_free_request_blocks`):
`pop_blocks_for_free` empties the request's tables and the blocks stay held until the step is
processed, when `_drain_deferred_frees` hands them to the pool (`block_pool.free_blocks(
reversed(blocks))`), oldest first. Standard library only.

Here most frees and preemptions are deferred (`defer`), and `release` ops return them, mostly
oldest first as the scheduler's queue does, sometimes out of order (a shrinker's drop, or the
queue's head still pending); requests are admitted again, and hit their own deferred blocks,
while those are held; resets come with frees pending (refused: blocks are held). Before most
finishes the scheduler's `remove_skipped_blocks` of the request (`remove_skipped`: with a
connector `_connector_finished` frees what the window skips before `request_finished` reads
the table).
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager import connector
from kvfuzz.strategies.kvmanager.connector import _Connected
from kvfuzz.strategies.kvmanager.trace import Finish, Preempt, Release, RemoveSkipped, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "deferred frees"


def build(rng: random.Random, num_ops: int) -> Trace:
    return connector.build(rng, num_ops, _Deferring, PROFILE)


class _Deferring(_Connected):
    """The connector generator whose frees are mostly deferred, with releases to match."""

    def __init__(self, rng: random.Random, block_size: int, max_model_len: int):
        super().__init__(rng, block_size, max_model_len)
        self.pending: list[int] = []  # the rids of deferred frees, oldest first

    def step(self) -> None:
        if self.pending and self.rng.random() < 0.25:
            self.release()
        else:
            super().step()

    def preempt(self) -> None:
        super().preempt()
        self._deferred(Preempt)

    def finish(self) -> None:
        super().finish()
        if self.rng.random() < 0.8:  # the scheduler's call before request_finished (most)
            self.ops.insert(len(self.ops) - 1, RemoveSkipped(self.ops[-1].rid))
        self._deferred(Finish)

    def _deferred(self, kind) -> None:
        """The free just written, deferred (seven in ten)."""
        if self.rng.random() < 0.7:
            rid = self.ops[-1].rid
            self.ops[-1] = kind(rid, defer=True)
            self.pending.append(rid)

    def release(self) -> None:
        rng = self.rng
        index = 0 if rng.random() < 0.8 else rng.randrange(len(self.pending))
        self.ops.append(Release(self.pending.pop(index)))


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[deferred frees]", build, num_ops=200, max_fuzz_ops=200)
