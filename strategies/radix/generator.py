"""Seeded scheduler-like radix traces (`radix/2`): trace `index` of `seed` is the same forever; a
change to what this produces must bump the version.

Aimed where a prefix cache's bugs live: prompts drawn from a few families over a small vocabulary
(so matches end inside nodes and split them, and two requests insert the same tokens), key
lengths one below, at and one above page edges, pools small enough that admission evicts and
allocations are refused, chunked prefill with a checkpoint at every chunk, decode steps across
page edges, requests finished cached and not, probes that only match, touch or pin, load-back
inserts with the caller's tensor, direct evictions of exactly, one fewer and one more than the
evictable tokens, namespaces and priorities, every eviction policy, events on and off; and,
unless an implementation declares it does not support it (`generator_for`), resets with
requests in flight; an entry that declares it runs without priorities gets the same traces
with every priority 0. Since `radix/2`, one trace in eight also has long prompts (hundreds of
tokens, past CPython's cache of small ints, where an `is` between two lengths stops meaning
`==`), prefilled in a few large chunks with a checkpoint between, in a pool that holds two of
them. `build(..., long_prompts=False)` is the `radix/1` stream (the unified target's).
"""

from __future__ import annotations

import functools
import random

from kvfuzz.strategies.radix.trace import (POLICIES, PRIORITIES, RESET_IN_FLIGHT, Admit,
                                           Checkpoint, Evict, Extend, Finish, Insert, Match, Pin,
                                           Reset, Touch, Trace)
from kvfuzz.strategies.sources import TraceGenerator, misuse_stream

ALL_MISUSE = frozenset((RESET_IN_FLIGHT, PRIORITIES))
VOCABULARY = 5  # tokens 1..5: random tails often agree with a family for a while


LONG_SHARE = 1 / 8
LONG_MIN, LONG_MAX = 257, 320  # tokens in a long prompt: len() of these is a fresh int object


def build(rng: random.Random, num_ops: int, allowed: frozenset = ALL_MISUSE,
          long_prompts: bool = False) -> Trace:
    page = rng.choice((1, 1, 2, 4, 8, 16))
    pages = rng.choice((rng.randint(3, 8), rng.randint(8, 24), rng.randint(24, 64)))
    gen = _Generator(rng, page, allowed)
    if long_prompts and rng.random() < LONG_SHARE:
        gen.add_long_family()
        pages = max(pages, -(-rng.randint(2 * LONG_MAX + 16, 3 * LONG_MAX) // page))
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(page, page * pages, rng.choice(POLICIES), rng.random() < 0.5,
                 tuple(gen.ops[:num_ops]))


class _Generator:
    """A rough picture of the live requests steers the mix (what matched, and so how far a
    request really is, is the harness's business: an extend stops at the prompt's end)."""

    def __init__(self, rng: random.Random, page: int, allowed: frozenset):
        self.rng, self.page, self.allowed = rng, page, allowed
        self.families = [self.sequence(rng.randint(2, 6) * page + rng.randint(0, 3))
                         for _ in range(rng.randint(1, 3))]
        self.long: list[int] = []  # a long family (radix/2's long traces), else none
        self.live: dict[int, list[int]] = {}  # rid -> [prompt, tokens in all, tokens asked]
        self.stale: list[int] = []  # live at a reset: finishing one drops a void lock
        self.done: list[tuple[int, ...]] = []  # every request's tokens: follow-up prompts
        self.next_rid = 0
        self.ops: list = []

    def step(self) -> None:
        live = len(self.live)
        actions = [(self.admit, 2.0 if live < 6 else 0.3), (self.advance, 3.0 if live else 0),
                   (self.finish, 0.6 + 0.3 * live if live or self.stale else 0),
                   (self.probe, 0.6),
                   (self.insert, 0.4), (self.evict, 0.4), (self.reset, 0.08)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def add_long_family(self) -> None:
        """A long prompt family: an ordinary family's tokens, continued to LONG_MAX."""
        base = self.rng.choice(self.families)
        self.long = base + self.sequence(LONG_MAX - len(base))

    def sequence(self, length: int) -> list[int]:
        return [self.rng.randint(1, VOCABULARY) for _ in range(length)]

    def length(self) -> int:
        """A key length one below, at or one above a page edge (never 0)."""
        return max(1, self.rng.randint(0, 4) * self.page + self.rng.choice((-1, 0, 0, 1)))

    def tokens(self) -> list[int]:
        """A family's prefix and a random tail: a key that shares a prefix with others."""
        rng = self.rng
        base = rng.choice(self.families)
        cut = min(len(base), self.length())
        return base[:cut] + self.sequence(max(0, self.length() - cut) if rng.random() < 0.6
                                          else rng.randint(0, 2))

    def namespace(self) -> int:
        return 0 if self.rng.random() < 0.85 else self.rng.randint(1, 2)

    def priority(self) -> int:
        # Drawn whether or not the stream keeps it: from the same randomness, a build without
        # priorities is the build with them, op for op, every priority 0.
        drawn = 0 if self.rng.random() < 0.7 else self.rng.randint(0, 3)
        return drawn if PRIORITIES in self.allowed else 0

    def admit(self) -> None:
        rng = self.rng
        self.next_rid += 1
        rid, prompt = self.next_rid, self.tokens() or [1]
        if self.long and rng.random() < 0.4:  # a long prompt: the family cut past LONG_MIN
            prompt = self.long[:rng.randint(LONG_MIN, LONG_MAX)]
        elif self.done and rng.random() < 0.2:  # a follow-up turn: an earlier request, and more
            prompt = list(rng.choice(self.done)) + self.sequence(rng.choice((0, 0, 1, self.page)))
        outputs = self.sequence(rng.randint(0, 2 * self.page + 2))
        self.ops.append(Admit(rid, tuple(prompt + outputs), len(prompt), self.namespace(),
                              self.priority()))
        self.done.append(tuple(prompt + outputs))
        self.live[rid] = [len(prompt), len(prompt) + len(outputs), 0]
        if rng.random() < 0.8:
            self.advance(rid)

    def advance(self, rid: int | None = None) -> None:
        """The request's next prefill chunk (and its checkpoint), or decode steps."""
        rng = self.rng
        rid = rid if rid is not None else rng.choice(list(self.live))
        prompt, total, asked = self.live[rid]
        if asked < prompt:
            # a long prompt in a few chunks of a third or more (else up to two pages a chunk)
            long = self.long and prompt >= LONG_MIN
            low, high = (prompt // 3, prompt - 1) if long else (1, max(1, 2 * self.page))
            chunk = prompt if rng.random() < 0.5 else rng.randint(low, high)
            self.ops.append(Extend(rid, chunk))
            self.live[rid][2] = asked + chunk
            if asked + chunk < prompt and rng.random() < 0.8:
                self.ops.append(Checkpoint(rid))
            return
        steps = rng.choice((1, 1, 1, 2, self.page + 1))
        self.ops.append(Extend(rid, steps))
        self.live[rid][2] = asked + steps
        if rng.random() < 0.1:
            self.ops.append(Checkpoint(rid))

    def finish(self) -> None:
        rid = self.rng.choice(list(self.live) + self.stale)
        if rid in self.live:
            del self.live[rid]
        else:
            self.stale.remove(rid)
        self.ops.append(Finish(rid, cache=self.rng.random() < 0.85))

    def probe(self) -> None:
        kind = self.rng.choice((Match, Match, Touch, Pin))
        self.ops.append(kind(tuple(self.tokens()), self.namespace()))

    def insert(self) -> None:
        self.ops.append(Insert(tuple(self.tokens()), self.namespace(), self.priority()))

    def evict(self) -> None:
        rng = self.rng
        if rng.random() < 0.5:
            self.ops.append(Evict(rng.choice((-self.page, -1, 0, 1, self.page)), relative=True))
        else:
            self.ops.append(Evict(rng.randint(0, 6 * self.page)))

    def reset(self) -> None:
        in_flight = RESET_IN_FLIGHT in self.allowed and self.rng.random() < 0.3
        if not in_flight:  # the scheduler flushes when idle: finish everything first
            for rid in list(self.live):
                self.ops.append(Finish(rid, cache=self.rng.random() < 0.85))
        self.stale += list(self.live)
        self.live.clear()
        self.ops.append(Reset())


NAME = "radix/2"
GENERATOR = TraceGenerator(NAME, functools.partial(build, long_prompts=True), num_ops=120,
                           max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


def generator_for(unsupported: frozenset) -> TraceGenerator:
    """The generator for an implementation that does not support the misuse in `unsupported`:
    its own stream of traces, e.g. "radix/2[no reset with requests in flight]"."""
    return misuse_stream(GENERATOR, ALL_MISUSE, unsupported)
