"""Seeded plain-random offload traces (`offload/2`): trace `index` of `seed` is the same forever.

Shaped as vLLM's offloading connector calls its manager: requests arrive from a few prompt
families (so chunks are shared and hit), look their prefix up and load what hits, store their
chunks a range at a time, finish; transfers complete later, out of order across requests, a few
of the stores failing. Aimed where a manager's bugs live: pools of 0 to 40 chunks filled by
stores in flight (everything in flight, stores refused), loads of chunks still being stored,
the same chunk loaded by two requests, requests that come back for their chunks (ARC's ghost
hits), repeated touches, lookups of evicted chunks, two groups, requests without positions, a
store threshold with a small tracker, resets with transfers in flight, a request finished right
after a reset or finished twice. A change to what this produces must bump the version.
"""

from __future__ import annotations

import functools
import random

from kvfuzz.strategies.offload.profile import drains_events, policies, resets, thresholds
from kvfuzz.strategies.offload.trace import (POLICIES, CompleteLoad, CompleteStore, Events,
                                             Finish, Load, Lookup, New, Reset, Store, Touch,
                                             Trace)
from kvfuzz.strategies.sources import TraceGenerator

DEFAULT_TRACKER = 64_000  # vLLM's max_tracker_size


def build(rng: random.Random, num_ops: int, allowed: tuple[str, ...] = POLICIES,
          drain: bool = False, resets: bool = True, thresholds: bool = True) -> Trace:
    policy = rng.choice(allowed)
    chunks = rng.choice((rng.randint(1, 4), rng.randint(4, 12), rng.randint(12, 40)))
    if rng.random() < 0.04:
        # CPU bytes below one chunk: vLLM's spec builds the manager with no chunks at all (and
        # says so: its worker falls back for num_chunks == 0); every store is refused
        chunks = 0
    groups = 1 if rng.random() < 0.8 else 2
    events = rng.random() < 0.85
    threshold = 1 if rng.random() < 0.8 else rng.randint(2, 3)
    tracker = rng.randint(1, 6) if rng.random() < 0.5 else DEFAULT_TRACKER
    if not thresholds:  # (drawn all the same: the rest of the trace is the stream's own)
        threshold, tracker = 1, DEFAULT_TRACKER
    gen = _Generator(rng, events, drain, resets)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(policy, chunks, groups, events, threshold, tracker, tuple(gen.ops[:num_ops]))


class _Request:
    def __init__(self, hashes: tuple[int, ...]):
        self.hashes, self.cursor, self.looked = hashes, 0, False
        self.stores = self.loads = 0  # transfers in flight, as far as the generator knows


class _Generator:
    """A rough picture of the requests and their transfers steers the mix; whether a store
    stores anything or a load loads is the harness's business at run time."""

    def __init__(self, rng: random.Random, events: bool, drain: bool, resets: bool = True):
        self.rng, self.events, self.drain, self.resets = rng, events, drain, resets
        self.families = [tuple(f * 1000 + i + 1 for i in range(rng.randint(3, 14)))
                         for f in range(1, rng.randint(1, 4) + 1)]
        self.live: dict[int, _Request] = {}     # not finished
        self.done: dict[int, _Request] = {}     # finished, transfers maybe in flight
        self.next_rid, self.next_tail = 0, 100_000
        self.max_live = rng.randint(1, 6)
        self.completing = rng.choice((0.3, 0.8, 1.6))  # low: transfers pile up in flight
        self.failing = rng.choice((0.0, 0.1, 0.3))
        self.touched: Touch | None = None
        self.ops: list = []

    def step(self) -> None:
        busy = [r for r in (*self.live.values(), *self.done.values()) if r.stores or r.loads]
        actions = [(self.admit, 1.5 if len(self.live) < self.max_live else 0),
                   (self.advance, 3.0 if self.live else 0),
                   (self.complete, self.completing * 3 if busy else 0),
                   (self.take_events, 0.5 if self.events else 0),
                   (self.touch, 0.4 if self.live else 0),
                   (self.lookup, 0.4 if self.live else 0),
                   (self.reset, 0.03 if self.resets else 0),
                   (self.finish_again, 0.05 if self.done else 0)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def admit(self) -> None:
        """A new request: a family's prefix with a tail of its own, or now and then the very
        chunks of an earlier request (a conversation's next turn: its chunks, evicted meanwhile,
        are ARC's ghost hits)."""
        rng = self.rng
        if self.done and rng.random() < 0.25:
            hashes = rng.choice(list(self.done.values())).hashes
        else:
            family = rng.choice(self.families)
            hashes = family[:rng.randint(1, len(family))]
            tail = rng.choice((0, 0, 0, 1, 2, 3))
            hashes += tuple(range(self.next_tail, self.next_tail + tail))
            self.next_tail += tail
        self.next_rid += 1
        self.live[self.next_rid] = _Request(hashes)
        self.ops.append(New(self.next_rid, hashes, rng.random() < 0.92))

    def advance(self) -> None:
        """The next thing the connector does for one request: a load first (retried now and
        then, as a request waiting for a chunk being stored is), its load completed before it
        stores, then its chunks stored range by range, then finished."""
        rng = self.rng
        rid = rng.choice(list(self.live))
        request = self.live[rid]
        if not request.looked:
            self.ops.append(Load(rid, 0, len(request.hashes)))
            request.looked = rng.random() < 0.7
            request.loads += 1
        elif request.loads and rng.random() < 0.8:
            self.ops.append(CompleteLoad(rid))
            request.loads -= 1
        elif request.cursor < len(request.hashes):
            stop = min(len(request.hashes), request.cursor + rng.choice(
                (1, 1, 2, 3, len(request.hashes))))
            self.ops.append(Store(rid, request.cursor, stop))
            request.cursor, request.stores = stop, request.stores + 1
        else:
            self.ops.append(Finish(rid))
            self.done[rid] = self.live.pop(rid)

    def complete(self) -> None:
        rng = self.rng
        busy = [(rid, r) for rid, r in (*self.live.items(), *self.done.items())
                if r.stores or r.loads]
        rid, request = rng.choice(busy)
        if request.stores and (not request.loads or rng.random() < 0.6):
            self.ops.append(CompleteStore(rid, rng.random() >= self.failing))
            request.stores -= 1
        else:
            self.ops.append(CompleteLoad(rid))
            request.loads -= 1

    def take_events(self) -> None:
        self.ops.append(Events())

    def touch(self) -> None:
        rng = self.rng
        if self.touched is not None and self.touched.rid in self.live and rng.random() < 0.4:
            self.ops.append(self.touched)  # the same chunks touched again
            return
        rid = rng.choice(list(self.live))
        size = len(self.live[rid].hashes)
        start = rng.randint(0, size - 1)
        self.touched = Touch(rid, start, rng.randint(start + 1, size))
        self.ops.append(self.touched)

    def lookup(self) -> None:
        rid = self.rng.choice(list(self.live))
        self.ops.append(Lookup(rid, 0, len(self.live[rid].hashes)))

    def reset(self) -> None:
        """A cache reset between steps: transfers in flight go stale, and the live requests
        store their chunks again from the first (as the connector resets their progress)."""
        if self.drain and self.events:
            self.ops.append(Events())
        self.ops.append(Reset())
        for request in (*self.live.values(), *self.done.values()):
            request.stores = request.loads = request.cursor = 0
        if self.live and self.rng.random() < 0.5:  # one that finishes before it stores again
            rid = self.rng.choice(list(self.live))
            self.ops.append(Finish(rid))
            self.done[rid] = self.live.pop(rid)

    def finish_again(self) -> None:
        """`on_request_finished` of a finished request (the manager must ignore it)."""
        self.ops.append(Finish(self.rng.choice(list(self.done))))


NAME = "offload/2"  # /2: pools of no chunks
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


@functools.cache
def generator_for(preconditions: frozenset) -> TraceGenerator:
    """The generator for an implementation declaring `preconditions`: its own stream of traces,
    e.g. "offload/2[arc, events drained]"."""
    allowed, drain = policies(preconditions), drains_events(preconditions)
    reset, threshold = resets(preconditions), thresholds(preconditions)
    if allowed == POLICIES and not drain and reset and threshold:
        return GENERATOR
    tags = ([f"{allowed[0]} only"] if len(allowed) == 1 else []) + \
        (["events drained"] if drain else []) + ([] if reset else ["no reset"]) + \
        ([] if threshold else ["no threshold"])
    return TraceGenerator(f"{NAME}[{', '.join(tags)}]",
                          functools.partial(build, allowed=allowed, drain=drain, resets=reset,
                                            thresholds=threshold),
                          num_ops=200, max_fuzz_ops=200)
