"""Seeded plain-random allocator traces (`allocator/3`): trace `index` of `seed` is the same forever.

Aimed where allocator bugs live: small pools filled to exactly fit or miss by one page (now and
then a big one, past 256 pages), churn near capacity, need_sort on and off, page sizes 1 and up, long decode runs, free groups (a nested
begin, an end without a begin, a clear inside one now and then, and an end after that clear),
shared prefixes, a `free_segment` from inside a page now and then (rejected in every mode);
about one trace in seven also carries misuse on purpose (debug checks on). An implementation's declared
preconditions give a `Profile` (profile.py), and a generator of its own (`generator_for`).
A change to what this produces must bump the generator version.
"""

from __future__ import annotations

import functools
import random

from kvfuzz.strategies.allocator.profile import DEFAULT, Profile, profile_for
from kvfuzz.strategies.allocator.trace import (MISUSES, Admit, AllocPages, Clear,
                                               Decode, Extend, Finish, GroupBegin, GroupEnd,
                                               Misuse, Trace, Truncate)
from kvfuzz.strategies.sources import TraceGenerator

MISUSE_RATE = 0.15
GROUP_MISUSE_RATE = 0.05  # per free group, each kind
UNALIGNED_RATE = 0.1      # per truncate: a buggy caller's segment from inside a page
BIG_POOL_RATE = 0.04      # a pool of 257 to 320 pages


def build(rng: random.Random, num_ops: int, profile: Profile = DEFAULT) -> Trace:
    P = rng.choice(profile.page_sizes)
    num_pages = rng.choice((rng.randint(2, 8), rng.randint(8, 24), rng.randint(24, 64)))
    big = rng.random() < BIG_POOL_RATE
    if big:  # counts past 256, where an `is` between two ints stops meaning ==
        num_pages = rng.randint(257, 320)
    size = num_pages * P + (rng.randint(0, P - 1) if rng.random() < 0.25 else 0)
    need_sort = rng.random() < 0.5
    caller_bugs = tuple(kind for kind in MISUSES if kind in profile.misuses)
    misuse = rng.random() < MISUSE_RATE and bool(caller_bugs)
    debug = misuse or rng.random() < (0.5 if big else 0.1)
    gen = _Generator(rng, P, num_pages, misuse, profile)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(P, size, need_sort, tuple(gen.ops[:num_ops]), debug, profile.interface)


class _Generator:
    """Keeps a rough picture of the live requests (lengths, pages used) to steer the op mix;
    exact capacity is the harness's business (`Extend.fill`, `AllocPages.relative`)."""

    def __init__(self, rng: random.Random, page_size: int, num_pages: int, misuse: bool,
                 profile: Profile):
        self.rng, self.P, self.num_pages, self.misuse = rng, page_size, num_pages, misuse
        self.allowed, self.hows = set(profile.misuses), profile.hows
        self.lens: dict[int, int] = {}
        self.next_rid = 0
        self.ops: list = []

    def pressure(self) -> float:
        used = sum(-(-n // self.P) for n in self.lens.values())
        return min(1.0, used / self.num_pages)

    def step(self) -> None:
        pressure = len(self.lens) and self.pressure()
        actions = [(self.admit, 3.0 if len(self.lens) < 8 else 0.3),
                   (self.extend, 2.0 if self.lens else 0), (self.fill, 1.0 if self.lens else 0),
                   (self.decode_run, 3.0 if self.lens else 0),
                   (self.finish, (0.5 + 4 * pressure) if self.lens else 0),
                   (self.truncate, 0.4 if self.lens else 0), (self.group, 0.6 if self.lens else 0),
                   (self.alloc, 0.7), (self.clear, 0.05), (self.abuse, 0.6 if self.misuse else 0)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def _rid(self) -> int:
        self.next_rid += 1
        return self.next_rid

    def _some(self, most: int) -> list[int]:
        live = sorted(self.lens)
        return self.rng.sample(live, self.rng.randint(1, min(most, len(live))))

    def _tokens(self) -> int:
        P, rng = self.P, self.rng
        return rng.choice((0, rng.randint(1, P), rng.randint(1, 3 * P),
                           rng.randint(P, max(P, self.num_pages * P // 3))))

    def admit(self) -> None:
        rid, rng = self._rid(), self.rng
        if self.lens and rng.random() < 0.3:
            donor = rng.choice(sorted(self.lens))
            self.ops.append(Admit(rid, donor, rng.randint(1, 3)))
            self.lens[rid] = min(self.lens[donor], 3 * self.P) // self.P * self.P
        else:
            self.ops.append(Admit(rid))
            self.lens[rid] = 0
        prompt = self._tokens()
        for chunk in range(rng.choice((1, 1, 2, 3))):  # chunked prefill
            others = [r for r in self._some(3) if r != rid] if rng.random() < 0.3 else []
            lens = [rng.randint(0, 2 * self.P) for _ in others] + [prompt // (chunk + 1)]
            self.ops.append(Extend(tuple(others) + (rid,), tuple(lens)))
            for r, n in zip(others + [rid], lens):
                self.lens[r] += n

    def extend(self) -> None:
        rids = self._some(4)
        lens = [self.rng.choice((0, self.rng.randint(1, 2 * self.P))) for _ in rids]
        self.ops.append(Extend(tuple(rids), tuple(lens), exact=self.rng.random() < 0.3))
        for r, n in zip(rids, lens):
            self.lens[r] += n

    def fill(self) -> None:
        """The batch needs exactly the available pages, one fewer, or one more (it must fail)."""
        rids, rng = self._some(3), self.rng
        lens = [rng.randint(0, self.P) for _ in rids]
        self.ops.append(Extend(tuple(rids), tuple(lens), fill=rng.choice((-1, 0, 0, 1)),
                               trim=rng.randint(0, self.P - 1), exact=rng.random() < 0.3))
        self.lens[rids[-1]] += self.num_pages * self.P  # roughly: the pool is now full

    def decode_run(self) -> None:
        rng = self.rng
        pressure = self.pressure()
        if pressure > 0.7 and len(self.lens) > 1 and rng.random() < 0.8:
            self.finish()  # retract, as a scheduler does before decoding a full pool
        long_run = rng.randint(10, 40) if pressure < 0.5 else 3
        steps = rng.choice((1, 1, 2, 5, long_run))
        rids = () if rng.random() < 0.7 else tuple(self._some(4))
        for _ in range(steps):
            self.ops.append(Decode(rids))
        for r in rids or list(self.lens):
            self.lens[r] += steps

    def finish(self) -> None:
        rid = self.rng.choice(sorted(self.lens))
        self.ops.append(Finish(rid, self.rng.choice(self.hows)))
        del self.lens[rid]
        if self.misuse and self.rng.random() < 0.3 and "double_free" in self.allowed:
            self.ops.append(Misuse("double_free", self.rng.randint(0, 99)))

    def truncate(self) -> None:
        rid = self.rng.choice(sorted(self.lens))
        keep = self.rng.randint(0, self.lens[rid])
        self.ops.append(Truncate(rid, keep, self.rng.choice(self.hows)))
        self.lens[rid] = keep
        if self.rng.random() < UNALIGNED_RATE and "segment_unaligned" in self.allowed:
            self.ops.append(Misuse("segment_unaligned", self.rng.randint(0, 99)))

    def group(self) -> None:
        rng = self.rng
        self.ops.append(GroupBegin())
        self._group_misuse("group_begin_nested")
        for _ in range(rng.randint(1, 4)):
            if self.lens:
                (self.finish if rng.random() < 0.7 else self.truncate)()
        if rng.random() < GROUP_MISUSE_RATE:
            self.clear()  # inside the group: clears and closes it, and forgets what it held
            if rng.random() < 0.5:  # so an end now has nothing to release
                self._group_misuse("group_end_unopened", always=True)
            return
        self.ops.append(GroupEnd())
        self._group_misuse("group_end_unopened")

    def _group_misuse(self, kind: str, always: bool = False) -> None:
        if (always or self.rng.random() < GROUP_MISUSE_RATE) and kind in self.allowed:
            self.ops.append(Misuse(kind, self.rng.randint(0, 99)))

    def alloc(self) -> None:
        rid, rng = self._rid(), self.rng
        if rng.random() < 0.4:
            self.ops.append(AllocPages(rid, rng.choice((-1, 0, 0, 1)), relative=True))
            self.lens[rid] = self.num_pages * self.P
        else:
            pages = rng.randint(0, 4)
            self.ops.append(AllocPages(rid, pages))
            self.lens[rid] = pages * self.P

    def clear(self) -> None:
        self.ops.append(Clear())
        self.lens.clear()

    def abuse(self) -> None:
        kinds = [kind for kind in MISUSES if kind in self.allowed]
        self.ops.append(Misuse(self.rng.choice(kinds), self.rng.randint(0, 99)))


NAME = "allocator/3"
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


@functools.cache
def generator_for(preconditions: tuple[str, ...]) -> TraceGenerator:
    """The generator of an implementation that declares `preconditions`: its own stream of
    traces, named e.g. "allocator/3[P>=2,no-release-checks]", so a (generator, seed, index)
    still names one trace forever."""
    profile = profile_for(preconditions)
    if not profile.tags:
        return GENERATOR
    return TraceGenerator(f"{NAME}[{','.join(profile.tags)}]",
                          functools.partial(build, profile=profile), num_ops=200,
                          max_fuzz_ops=200)
