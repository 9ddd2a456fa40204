"""Seeded scheduler-like block-pool traces (`blockpool/2`): trace `index` of `seed` is the same
forever; a change to what this produces must bump the version (`blockpool/1` had no pins and no
double frees).

Aimed where a block pool's bugs live: requests over a few prompt families (so prefix hits and
the same hash cached by two blocks are common), pools of 2 to 64 blocks run to exactly full and
one past it, blocks freed in the manager's reverse order or in table order, cached blocks coming
back from the free queue (`touch` of a block with no references), null blocks in tables, reuse
watchers (`unpin_blocks`), evictions of held and free blocks, and resets with and without blocks
held; the same block twice in one `free_blocks` call, once per reference (a pinned request), and,
unless an implementation declares its callers never do it (`generator_for`), a double free.
Pools without prefix caching get no cache ops (the manager makes none).
"""

from __future__ import annotations

import functools
import random

from kvfuzz.strategies.blockpool.profile import double_frees_allowed
from kvfuzz.strategies.blockpool.trace import (Alloc, Cache, DoubleFree, Evict, Free, Lookup,
                                               Pad, Pin, Probe, Reset, Share, Trace, Unpin)
from kvfuzz.strategies.sources import TraceGenerator


def build(rng: random.Random, num_ops: int, double_free: bool = True) -> Trace:
    blocks = rng.choice((rng.randint(2, 8), rng.randint(8, 32), rng.randint(32, 64)))
    caching = rng.random() < 0.85
    gen = _Generator(rng, blocks, caching, double_free)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(blocks, caching, tuple(gen.ops[:num_ops]))


class _Generator:
    """Prompts are lists of block contents; a block's hash stands for its whole prefix (vLLM's
    chained hashes), so two prompts of a family share hashes up to where they part."""

    def __init__(self, rng: random.Random, blocks: int, caching: bool, double_free: bool):
        self.rng, self.blocks, self.caching = rng, blocks, caching
        self.double_free = double_free
        self.families = [[rng.randrange(1 << 30) for _ in range(rng.randint(2, 10))]
                         for _ in range(rng.randint(1, 3))]
        self.hash_ids: dict[tuple, int] = {}
        self.live: dict[int, tuple[list[int], int]] = {}  # rid -> (block contents, group)
        self.next_rid = 0
        self.ops: list = []

    def step(self) -> None:
        held = len(self.live)
        actions = [(self.admit, 3.0), (self.grow, 2.0 if held else 0),
                   (self.finish, 0.6 + 0.3 * held if held else 0), (self.edge_alloc, 0.4),
                   (self.evict, 0.3), (self.probe, 0.4 if self.caching else 0),
                   (self.reset, 0.15), (self.pin, 0.25 if held else 0),
                   (self.free_twice, 0.1 if held and self.double_free else 0)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def hashes(self, contents: list[int]) -> tuple[int, ...]:
        return tuple(self.hash_ids.setdefault(tuple(contents[:i + 1]), len(self.hash_ids) + 1)
                     for i in range(len(contents)))

    def prompt(self) -> list[int]:
        rng = self.rng
        base = rng.choice(self.families)
        parted = rng.randint(0, len(base))
        return base[:parted] + [rng.randrange(1 << 30) for _ in range(rng.randint(0, 4))]

    def admit(self) -> None:
        rng = self.rng
        self.next_rid += 1
        rid, contents = self.next_rid, self.prompt()
        group = 1 if rng.random() < 0.2 else 0
        hashes = self.hashes(contents)
        self.live[rid] = (contents, group)
        others = [r for r in self.live if r != rid]
        if others and rng.random() < 0.12:
            self.ops.append(Share(rid, rng.choice(others), rng.randint(1, 6)))
        elif self.caching and rng.random() < 0.75:
            self.ops.append(Lookup(rid, hashes, group))
        if rng.random() < 0.1:
            self.ops.append(Pad(rid, rng.randint(1, 3)))
        self.ops.append(Alloc(rid, rng.randint(0, len(contents) + 1)))
        if self.caching and rng.random() < 0.85:
            self.ops.append(Cache(rid, hashes, group))

    def grow(self) -> None:
        """A decode step: one more block, and the block before it now full and cached."""
        rng = self.rng
        rid = rng.choice(list(self.live))
        contents, group = self.live[rid]
        contents.append(rng.randrange(1 << 30))
        self.ops.append(Alloc(rid, rng.choice((1, 1, 1, 2))))
        if self.caching and rng.random() < 0.8:
            self.ops.append(Cache(rid, self.hashes(contents), group))

    def finish(self) -> None:
        rng = self.rng
        rids = tuple(rng.sample(list(self.live), rng.randint(1, min(3, len(self.live)))))
        for rid in rids:
            del self.live[rid]
        if rng.random() < 0.12:
            self.ops.append(Unpin(rids))
        else:
            self.ops.append(Free(rids, reverse=rng.random() < 0.85))

    def pin(self) -> None:
        """A connector pins a request's blocks: its free then names each of them twice."""
        self.ops.append(Pin(self.rng.choice(list(self.live))))

    def free_twice(self) -> None:
        """A double free: refused, so the request stays live (and is freed properly later)."""
        self.ops.append(DoubleFree(self.rng.choice(list(self.live))))

    def edge_alloc(self) -> None:
        """Exactly the free blocks, one fewer, or one more (refused: nothing may change)."""
        self.next_rid += 1
        self.live[self.next_rid] = ([], 0)
        self.ops.append(Alloc(self.next_rid, self.rng.choice((-1, 0, 1)), relative=True))

    def evict(self) -> None:
        rng = self.rng
        self.ops.append(Evict(tuple(rng.randrange(self.blocks + 1)
                                    for _ in range(rng.randint(1, 3)))))

    def probe(self) -> None:
        rng = self.rng
        hashes = self.hashes(self.prompt())
        groups = rng.choice(((0,), (1,), (0, 1), (1, 0)))
        self.ops.append(Probe(hashes, groups))

    def reset(self) -> None:
        rng = self.rng
        if self.live and rng.random() < 0.6:  # mostly once everything is freed: it succeeds
            rids = tuple(self.live)
            self.live.clear()
            self.ops.append(Free(rids))
        self.ops.append(Reset())


NAME = "blockpool/2"
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


@functools.cache
def generator_for(preconditions: frozenset) -> TraceGenerator:
    """The generator of an implementation that declares `preconditions` (`profile.py`): its own
    stream, "blockpool/2[no double free]", where its callers never double-free."""
    if double_frees_allowed(preconditions):
        return GENERATOR
    return TraceGenerator(f"{NAME}[no double free]", functools.partial(build, double_free=False),
                          num_ops=200, max_fuzz_ops=200)
