"""Seeded plain-random Mamba traces (`mamba/1`): trace `index` of `seed` is the same forever.

Aimed where a slot allocator's bugs live: pools of 2 to 128 slots filled to exactly fit or miss
by one, batch admission through alloc groups that pre-allocate more or fewer slots than the
batch then takes (the rest must go back), finishing in batches, clear; and, unless an
implementation declares it does not support them (`generator_for`), the group protocol misused:
a nested begin, a clear inside a group, a stray end. A class without alloc groups gets a stream
of its own ("mamba/1[no alloc groups,...]"): the same batches, each request taking its slot by
alloc(1) as SGLang's scheduler did before the groups existed. A change to what this produces
must bump the version.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.mamba.trace import (CLEAR_IN_GROUP, GROUPS, NESTED, STRAY_END, Admit,
                                           AllocMany, Clear, Finish, GroupBegin, GroupEnd, Trace)
from kvfuzz.strategies.sources import TraceGenerator, misuse_stream

MISUSE_RATE = 0.05  # per group, each kind
ALL_MISUSE = frozenset((NESTED, CLEAR_IN_GROUP, STRAY_END))
# What a stream may leave out: the misuse, and (for a class without them) the groups themselves.
ALL_KINDS = ALL_MISUSE | {GROUPS}


def build(rng: random.Random, num_ops: int, allowed: frozenset = ALL_KINDS) -> Trace:
    size = rng.choice((rng.randint(2, 8), rng.randint(8, 32), rng.randint(32, 128)))
    gen = _Generator(rng, size, allowed)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(size, tuple(gen.ops[:num_ops]))


class _Generator:
    """A rough picture of the live requests steers the mix; exact capacity is the harness's
    business (`relative` counts)."""

    def __init__(self, rng: random.Random, size: int, allowed: frozenset):
        self.rng, self.size, self.allowed = rng, size, allowed
        self.live: list[int] = []
        self.next_rid = 0
        self.ops: list = []

    def step(self) -> None:
        full = len(self.live) / self.size
        actions = [(self.admit, 2.0), (self.batch, 2.0), (self.alloc, 0.6),
                   (self.finish, 0.5 + 4 * full if self.live else 0), (self.clear, 0.05),
                   (self.stray_end, 0.1 if {STRAY_END, GROUPS} <= self.allowed else 0)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def _rid(self) -> int:
        self.next_rid += 1
        self.live.append(self.next_rid)
        return self.next_rid

    def admit(self) -> None:
        self.ops.append(Admit(self._rid()))

    def batch(self) -> None:
        """A batch admitted through an alloc group: the group pre-allocates `count` slots (or
        available +-1), the batch takes as many, fewer or more."""
        rng = self.rng
        count = rng.randint(0, 6)
        relative = rng.random() < 0.25
        if GROUPS not in self.allowed:  # the batch alone: each request's own alloc(1)
            return self._batch_members(count)
        self.ops.append(GroupBegin(rng.choice((-1, 0, 0, 1)) if relative else count, relative))
        if NESTED in self.allowed and rng.random() < MISUSE_RATE:
            self.ops.append(GroupBegin(rng.randint(0, 3)))
        self._batch_members(count)
        if CLEAR_IN_GROUP in self.allowed and rng.random() < MISUSE_RATE:
            self.clear()
            return
        self.ops.append(GroupEnd())

    def _batch_members(self, count: int) -> None:
        rng = self.rng
        for _ in range(max(0, count + rng.choice((-2, -1, 0, 0, 0, 1, 2)))):
            self.admit() if rng.random() < 0.9 else self.alloc()

    def alloc(self) -> None:
        rng = self.rng
        if rng.random() < 0.4:
            self.ops.append(AllocMany(self._rid(), rng.choice((-1, 0, 0, 1)), relative=True))
        else:
            self.ops.append(AllocMany(self._rid(), rng.randint(0, 4)))

    def finish(self) -> None:
        rng = self.rng
        rids = rng.sample(self.live, rng.randint(1, min(4, len(self.live))))
        self.ops.append(Finish(tuple(rids)))
        self.live = [r for r in self.live if r not in rids]

    def clear(self) -> None:
        self.ops.append(Clear())
        self.live.clear()

    def stray_end(self) -> None:
        self.ops.append(GroupEnd())


NAME = "mamba/1"
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


def generator_for(unsupported: frozenset) -> TraceGenerator:
    """The generator for an implementation that does not support the misuse in `unsupported`:
    its own stream of traces, e.g. "mamba/1[no nested group begin]"."""
    return misuse_stream(GENERATOR, ALL_KINDS, unsupported)
