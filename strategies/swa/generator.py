"""Seeded plain-random SWA traces (`swa/3`): trace `index` of `seed` is the same forever.

Aimed where a hybrid allocator's bugs live: page sizes 1 (token pools) to 8 (3 among them, no power of two), an SWA pool smaller,
equal or larger than the full one and both tight, so that allocations fail on one pool only;
now and then the pools resized smaller before the first request (as SGLang sizes them once its
CUDA graphs are captured); prefill in chunks that continue a partial page, or a whole prefill
with SWA slots for its tail only (a disaggregated decode server's admission); decode steps that
open pages; window eviction (by slot set and by segment) that leaves the last page, and releases
of requests whose window has moved, both inside free groups as a scheduler batches them;
requests finished into the prefix cache and room reclaimed through it, around each pool's
available size, for an allocation or a preallocation, with a cache that shares prefixes, one
that does not, or none; a request's KV offloaded and back; clear; the group protocol misused (a
nested begin, a stray end); SGLang's debug and strict invariant checks on in some traces, and
there the caller bugs they reject (`scheduler_ops.MISUSES`), with the ones rejected in every mode
now and then everywhere. Unless an implementation declares that it is only called after the
scheduler's memory check (`generator_for`), some decodes run unchecked; one that lacks the
reclaim, resize, offload or tail calls gets none, and one that takes only a power-of-two page size
(an earlier release launching the Triton kernels) gets no page size 3. A change to what this
produces must bump the version.
"""

from __future__ import annotations

import functools
import random

from kvfuzz.strategies.sources import TraceGenerator
from kvfuzz.strategies.swa.scheduler_ops import (EVERY_MODE, MISUSES, TREES, Cache, Misuse,
                                                 Offload, Reclaim, Resize)
from kvfuzz.strategies.swa.trace import (HOWS, Admit, Clear, Decode, Evict, Extend, ExtendTail,
                                         Finish, GroupBegin, GroupEnd, Trace)

UNCHECKED_RATE = 0.3  # of decodes, where allowed
MISUSE_RATE = 0.03    # per group, each kind
RESIZE_RATE = 0.15    # a trace whose pools are resized before its first request
CHECKED_RATE = 0.2    # a trace with the debug checks on; the same for the strict ones
CACHE_RATE = 0.3      # of finishes: into the prefix cache
# What a class may lack (an earlier release's calls), by the name `generator_for` takes: it then
# gets none of those ops (a finish into the cache is then a plain finish).
OPTIONAL = ("reclaim", "resize", "offload", "tail", "group")


PAGE_SIZES = (1, 1, 2, 3, 4, 8)  # 3: a page size no power of two (no bit tricks)
POW2_PAGE_SIZES = tuple(p for p in PAGE_SIZES if not p & (p - 1))


def build(rng: random.Random, num_ops: int, unchecked: bool = True,
          hows: tuple[str, ...] = HOWS, lacking: tuple[str, ...] = (),
          page_sizes: tuple[int, ...] = PAGE_SIZES) -> Trace:
    P = rng.choice(page_sizes)
    pages = rng.choice((rng.randint(2, 6), rng.randint(6, 24), rng.randint(24, 64)))
    swa_pages = max(1, rng.choice((pages // 2, pages - 1, pages, pages + 2, rng.randint(1, 8))))
    slack = rng.choice((0, 0, 0, rng.randint(1, P))) if P > 1 else 0  # a size not in whole pages
    debug, strict = rng.random() < CHECKED_RATE, rng.random() < CHECKED_RATE
    gen = _Generator(rng, P, pages, unchecked, hows, debug, strict, lacking)
    if rng.random() < RESIZE_RATE and "resize" not in lacking:
        gen.resize(pages * P + slack % P, swa_pages * P)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(P, pages * P + slack % P, swa_pages * P, rng.random() < 0.3,
                 tuple(gen.ops[:num_ops]), debug, strict)


class _Generator:
    """A rough picture of the live requests and their lengths steers the mix; exact capacity is
    the harness's business (a call that cannot be served must return None)."""

    def __init__(self, rng: random.Random, P: int, pages: int, unchecked: bool,
                 hows: tuple[str, ...] = HOWS, debug: bool = False, strict: bool = False,
                 lacking: tuple[str, ...] = ()):
        self.rng, self.P, self.pages, self.unchecked = rng, P, pages, unchecked
        self.hows, self.lacking = hows, lacking  # how windows and requests are released
        # Caller bugs: each kind the checks of this trace reject, or every-mode ones
        self.misuses = MISUSES if debug or strict else EVERY_MODE
        self.misuse_rate = 0.3 if debug or strict else 0.02
        self.live: dict[int, int] = {}  # rid -> tokens (a guess: failed calls are not known)
        self.next_rid = 0
        self.ops: list = []

    def step(self) -> None:
        full = sum(self.live.values()) / (self.pages * self.P)
        grouped = "group" not in self.lacking
        actions = [(self.admit, 1.0 if len(self.live) < 8 else 0.1), (self.extend, 2.0),
                   (self.decode, 2.0), (self.evict, 1.0), (self.finish, 0.3 + 2 * full),
                   (self.batch, 0.6 * grouped), (self.clear, 0.03),
                   (self.stray_end, 0.05 * grouped),
                   (self.reclaim, 0.5 * ("reclaim" not in self.lacking)),
                   (self.offload, 0.1 * ("offload" not in self.lacking)),
                   (self.misuse, self.misuse_rate)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def _some(self, most: int) -> list[int]:
        rids = sorted(self.live)
        return self.rng.sample(rids, self.rng.randint(1, min(most, len(rids)))) if rids else []

    def admit(self) -> None:
        self.next_rid += 1
        self.live[self.next_rid] = 0
        self.ops.append(Admit(self.next_rid))
        # (the draw is made whatever the class lacks: a stream without "tail" stays as it was)
        if self.P > 1 and self.rng.random() < 0.2 and "tail" not in self.lacking:
            # a transferred prefill, SWA for its tail
            # (now and then none: a request with nothing to fill, which SGLang's decode
            # server also hands to the tail call, with a tail of 0)
            n = self.rng.randint(1, 12 * self.P) if self.rng.random() < 0.95 else 0
            tail = self.rng.choice((0, 1, self.P, self.rng.randint(0, n)))
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
            cached = self.rng.random() < CACHE_RATE and "reclaim" not in self.lacking
            self.ops.append(Cache(rid) if cached else Finish(rid, self.rng.choice(self.hows)))
            del self.live[rid]

    def reclaim(self) -> None:
        """Around a pool's available size: short by a token, exact, or over by up to pages."""
        rng, P = self.rng, self.P
        delta = rng.choice((-1, 0, 1, P, rng.randint(1, 4 * P), -rng.randint(1, 2 * P)))
        tree = rng.choices(TREES, (8, 1, 1))[0]
        self.ops.append(Reclaim(delta, rng.choice(("full", "swa")), rng.random() < 0.3, tree))

    def resize(self, size: int, size_swa: int) -> None:
        """Smaller, in whole pages (or the size built, slack and all)."""
        rng, P = self.rng, self.P
        size = rng.choice((size, rng.randint(1, max(1, size // P)) * P))
        size_swa = rng.choice((size_swa, rng.randint(1, max(1, size_swa // P)) * P))
        self.ops.append(Resize(size, size_swa))
        self.pages = max(1, size // P)

    def offload(self) -> None:
        for rid in self._some(1):
            self.ops.append(Offload(rid))

    def misuse(self) -> None:
        kind = self.rng.choice(self.misuses)
        if kind == "swa_evicted_twice":  # a window that moved first, to release again
            for rid in self._some(1):
                self.ops.append(Evict(rid, self.rng.choice((0, 1)), self.rng.choice(self.hows)))
        self.ops.append(Misuse(kind, self.rng.randint(0, 99)))

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
            if rng.random() < 0.5:  # the group's own end, after the clear closed it
                self.ops.append(GroupEnd())

    def clear(self) -> None:
        self.ops.append(Clear())
        self.live.clear()

    def stray_end(self) -> None:
        self.ops.append(GroupEnd())


NAME = "swa/3"
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


@functools.cache
def generator_for(checked_only: bool, segments: bool = True,
                  lacking: tuple[str, ...] = (), pow2: bool = False) -> TraceGenerator:
    """The generator for implementations only called after the scheduler's memory check: every
    decode checked (its own stream, "swa/3[checked decode]"); without `segments` (a class that
    has no segment releases) none ("...,no-segment]"); `lacking` (of `OPTIONAL`'s names: calls
    a class does not have) none of those ops ("...,no-reclaim]"); `pow2`: page sizes that are
    powers of two only ("...,pow2]")."""
    tags = ["checked decode"] * checked_only + ["no-segment"] * (not segments) + \
        [f"no-{name}" for name in lacking] + ["pow2"] * pow2
    if not tags:
        return GENERATOR
    return TraceGenerator(f"{NAME}[{','.join(tags)}]",
                          functools.partial(build, unchecked=not checked_only,
                                            hows=HOWS if segments else ("set",),
                                            lacking=lacking,
                                            page_sizes=POW2_PAGE_SIZES if pow2 else PAGE_SIZES),
                          num_ops=200, max_fuzz_ops=200)
