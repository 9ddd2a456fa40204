"""Seeded plain-random SWA traces (`swa/2`): trace `index` of `seed` is the same forever.

Aimed where a hybrid allocator's bugs live: page sizes 1 (token pools) to 8, an SWA pool smaller,
equal or larger than the full one and both tight, so that allocations fail on one pool only;
prefill in chunks that continue a partial page, or a whole prefill with SWA slots for its tail
only (a disaggregated decode server's admission); decode steps that open pages; window eviction
(by slot set and by segment) that leaves the last page, and releases of requests whose window
has moved, both inside free groups as a scheduler batches them; clear; and the group protocol
misused (a nested begin, a stray end). Unless an implementation declares that it is only called
after the scheduler's memory check (`generator_for`), some decodes run unchecked. A change to
what this produces must bump the version.
"""

from __future__ import annotations

import functools
import random

from kvfuzz.strategies.sources import TraceGenerator
from kvfuzz.strategies.swa.trace import (HOWS, Admit, Clear, Decode, Evict, Extend, ExtendTail,
                                         Finish, GroupBegin, GroupEnd, Trace)

UNCHECKED_RATE = 0.3  # of decodes, where allowed
MISUSE_RATE = 0.03    # per group, each kind


def build(rng: random.Random, num_ops: int, unchecked: bool = True,
          hows: tuple[str, ...] = HOWS) -> Trace:
    P = rng.choice((1, 1, 2, 4, 8))
    pages = rng.choice((rng.randint(2, 6), rng.randint(6, 24), rng.randint(24, 64)))
    swa_pages = max(1, rng.choice((pages // 2, pages - 1, pages, pages + 2, rng.randint(1, 8))))
    slack = rng.choice((0, 0, 0, rng.randint(1, P))) if P > 1 else 0  # a size not in whole pages
    gen = _Generator(rng, P, pages, unchecked, hows)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(P, pages * P + slack % P, swa_pages * P, rng.random() < 0.3,
                 tuple(gen.ops[:num_ops]))


class _Generator:
    """A rough picture of the live requests and their lengths steers the mix; exact capacity is
    the harness's business (a call that cannot be served must return None)."""

    def __init__(self, rng: random.Random, P: int, pages: int, unchecked: bool,
                 hows: tuple[str, ...] = HOWS):
        self.rng, self.P, self.pages, self.unchecked = rng, P, pages, unchecked
        self.hows = hows  # how windows and requests are released
        self.live: dict[int, int] = {}  # rid -> tokens (a guess: failed calls are not known)
        self.next_rid = 0
        self.ops: list = []

    def step(self) -> None:
        full = sum(self.live.values()) / (self.pages * self.P)
        actions = [(self.admit, 1.0 if len(self.live) < 8 else 0.1), (self.extend, 2.0),
                   (self.decode, 2.0), (self.evict, 1.0), (self.finish, 0.3 + 2 * full),
                   (self.batch, 0.6), (self.clear, 0.03), (self.stray_end, 0.05)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def _some(self, most: int) -> list[int]:
        rids = sorted(self.live)
        return self.rng.sample(rids, self.rng.randint(1, min(most, len(rids)))) if rids else []

    def admit(self) -> None:
        self.next_rid += 1
        self.live[self.next_rid] = 0
        self.ops.append(Admit(self.next_rid))
        if self.P > 1 and self.rng.random() < 0.2:  # a transferred prefill, SWA for its tail
            n = self.rng.randint(1, 12 * self.P)
            tail = self.rng.choice((0, 1, self.P, self.rng.randint(1, n)))
            self.ops.append(ExtendTail(self.next_rid, n, tail))
            self.live[self.next_rid] = n
        elif self.rng.random() < 0.7:  # admitted to prefill at once, mostly
            self.extend([self.next_rid])

    def extend(self, rids=None) -> None:
        rids = rids or self._some(3)
        if not rids:
            return self.admit()
        P, rng = self.P, self.rng
        lens = tuple(rng.choice((1, P, P + 1, rng.randint(1, 3 * P + 2), rng.randint(1, 12 * P)))
                     for _ in rids)
        for rid, n in zip(rids, lens):
            self.live[rid] += n
        self.ops.append(Extend(tuple(rids), lens))

    def decode(self) -> None:
        rids = () if self.rng.random() < 0.5 else tuple(self._some(4))
        for rid in rids or self.live:
            self.live[rid] += 1
        checked = not (self.unchecked and self.rng.random() < UNCHECKED_RATE)
        self.ops.append(Decode(rids, checked))

    def evict(self) -> None:
        for rid in self._some(2):
            keep = self.rng.choice((0, 1, self.P, self.rng.randint(0, 4 * self.P)))
            self.ops.append(Evict(rid, keep, self.rng.choice(self.hows)))

    def finish(self) -> None:
        for rid in self._some(2):
            self.ops.append(Finish(rid, self.rng.choice(self.hows)))
            del self.live[rid]

    def batch(self) -> None:
        """Releases and window evictions batched in a free group, as a scheduler does them."""
        rng = self.rng
        self.ops.append(GroupBegin())
        if rng.random() < MISUSE_RATE:
            self.ops.append(GroupBegin())
        for _ in range(rng.randint(1, 3)):
            rng.choice((self.evict, self.finish, self.decode))()
        self.ops.append(GroupEnd() if rng.random() > MISUSE_RATE else Clear())
        if self.ops[-1] == Clear():
            self.live.clear()

    def clear(self) -> None:
        self.ops.append(Clear())
        self.live.clear()

    def stray_end(self) -> None:
        self.ops.append(GroupEnd())


NAME = "swa/2"
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


@functools.cache
def generator_for(checked_only: bool, segments: bool = True) -> TraceGenerator:
    """The generator for implementations only called after the scheduler's memory check: every
    decode checked (its own stream, "swa/2[checked decode]"); without `segments` (a class that
    has no segment releases) none ("...,no-segment]")."""
    tags = ["checked decode"] * checked_only + ["no-segment"] * (not segments)
    if not tags:
        return GENERATOR
    return TraceGenerator(f"{NAME}[{','.join(tags)}]",
                          functools.partial(build, unchecked=not checked_only,
                                            hows=HOWS if segments else ("set",)),
                          num_ops=200, max_fuzz_ops=200)
