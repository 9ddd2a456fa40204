"""Seeded scheduler-like KV-cache-manager traces (`kvmanager/5`): trace `index` of `seed` is the
same forever; a change to what this produces must bump the version.

Aimed where a prefix-caching manager's bugs live: many requests over a few prompt families, so
that prefix hits, shared blocks and the same content cached twice are common; prompts cut at,
one before and one after block boundaries (the last token is never a hit); chunked prefill;
decode steps across block boundaries and out of the sliding window; preemption and re-admission
through the cache; tight pools where admission fails; eviction, resets, and requests that reach
`max_model_len`; the engine's settings: sliding-window retention dense, sparse (0, the engine's
default) and per segment, the whole-request admission check on and off, a small in-flight
budget, a watermark. A quarter of the traces are shaped instead as vLLM's own scheduler
shapes its calls (`scheduler_shape.py`, from recorded sessions), half of them with the KV
events and stats the scheduler drains every step.

The corner traces come from named profiles (`note` says which; the summary counts each
configuration as `config: ...`): "corners" (the settings above), "observed" (KV events, hits
reported in half, prefix-cache stats), "no caching" (prefix caching off), "spec decode"
(lookahead tokens on every allocation; EAGLE in half of those without a window), "async"
(asynchronous scheduling: tokens in flight; mostly with a window, which keeps extra tokens in
half). Every profile has requests that skip the prefix cache and steps of no tokens of their
own. (`kvmanager/1` had none of these settings; `kvmanager/2` no watermark; `kvmanager/3` no
scheduler-shaped traces; `kvmanager/4` one corner profile.)
"""

from __future__ import annotations

import functools
import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import scheduler_shape
from kvfuzz.strategies.kvmanager.trace import (Arrive, Decode, Evict, Finish, Preempt, Reset,
                                               Schedule, Trace)
from kvfuzz.strategies.sources import TraceGenerator

VOCAB = 40  # a small vocabulary: different requests often write the same block


# The share of traces shaped as vLLM's own scheduler shapes its calls (scheduler_shape.py):
# realistic step structure, budgets and preemption; the rest aim at the corners above.
SCHEDULER_SHARE = 0.25


PROFILES = {"corners": 0.4, "observed": 0.15, "no caching": 0.1, "spec decode": 0.15,
            "async": 0.2}


def build(rng: random.Random, num_ops: int) -> Trace:
    if rng.random() < SCHEDULER_SHARE:
        return build_scheduler(rng, num_ops)
    profile = rng.choices(list(PROFILES), list(PROFILES.values()))[0]
    return build_profile(rng, num_ops, profile)


def build_scheduler(rng: random.Random, num_ops: int) -> Trace:
    """A "scheduler" trace: shaped as vLLM's scheduler calls, half of them observed."""
    shaped = scheduler_shape.build(rng, num_ops)
    observed = rng.random() < 0.5
    return replace(shaped, events=observed, stats=observed, note="profile scheduler")


def build_profile(rng: random.Random, num_ops: int, profile: str) -> Trace:
    """A trace of `profile` (one of PROFILES, or "scheduler")."""
    if profile == "scheduler":
        return build_scheduler(rng, num_ops)
    return replace(build_corners(rng, num_ops, profile), note=f"profile {profile}")


def settings(rng: random.Random, profile: str, block_size: int, window: int) -> dict:
    """The configuration a corner trace of `profile` runs the manager in."""
    if profile == "observed":
        return {"events": True, "report": rng.random() < 0.5, "stats": True}
    if profile == "no caching":
        return {"caching": False, "stats": rng.random() < 0.5, "events": rng.random() < 0.3}
    if profile == "spec decode":
        return {"lookahead": rng.randint(1, 4), "eagle": not window and rng.random() < 0.5}
    if profile == "async":
        return {"async_scheduling": True,
                "retained": rng.randint(1, 2 * block_size) if window and rng.random() < 0.5
                else 0}
    return {}


def build_corners(rng: random.Random, num_ops: int, profile: str = "corners") -> Trace:
    block_size = rng.choice((1, 2, 4, 4, 8))
    window = 0 if rng.random() < (0.2 if profile == "async" else 0.5) else \
        rng.randint(2, 4 * block_size)
    blocks = rng.choice((rng.randint(2, 10), rng.randint(10, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * block_size + rng.randint(0, 3)))
    retention = rng.choice((None, 0, 0) + ((rng.randint(1, 4) * block_size,) if window else ()))
    fit = rng.random() < 0.5
    in_flight = None if rng.random() < 0.7 else rng.randint(1, 4 * block_size)
    watermark = 0.0 if rng.random() < 0.7 else rng.choice((0.01, 0.1, 0.2, 0.3))
    chosen = settings(rng, profile, block_size, window)
    gen = _Generator(rng, block_size, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(blocks, block_size, window, max_model_len, tuple(gen.ops[:num_ops]), retention,
                 fit, in_flight, watermark, **chosen)


class _Generator:
    def __init__(self, rng: random.Random, block_size: int, max_model_len: int):
        self.rng, self.block_size, self.max_len = rng, block_size, max_model_len
        self.families = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 8) * block_size)]
                         for _ in range(rng.randint(1, 3))]
        self.live: list[int] = []
        self.next_rid = 0
        self.ops: list = []

    def step(self) -> None:
        live = len(self.live)
        actions = [(self.arrive, 2.0 if live < 6 else 0.3), (self.schedule, 3.0 if live else 0),
                   (self.decode, 3.0 if live else 0), (self.preempt, 0.4 if live else 0),
                   (self.finish, 0.4 + 0.3 * live if live else 0), (self.evict, 0.2),
                   (self.reset, 0.1)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def arrive(self) -> None:
        rng, bs = self.rng, self.block_size
        base = rng.choice(self.families)
        cut = min(len(base), max(0, rng.randint(0, len(base) // bs) * bs
                                 + rng.choice((-1, 0, 0, 0, 1))))
        tokens = base[:cut] + [rng.randrange(VOCAB) for _ in range(rng.randint(0, 2 * bs))]
        tokens = (tokens or [rng.randrange(VOCAB)])[:max(1, self.max_len - 1)]
        self.next_rid += 1
        self.live.append(self.next_rid)
        # A few skip reading the prefix cache (prompt logprobs): they hit nothing.
        self.ops.append(Arrive(self.next_rid, tuple(tokens), rng.random() < 0.05))
        if rng.random() < 0.7:
            self.ops.append(Schedule(self.next_rid, self.chunk()))

    def chunk(self) -> int:
        """The whole prompt, a few blocks, or (a step with no tokens of its own: a hit adopted
        alone, else the caller's bug) none."""
        rng = self.rng
        if rng.random() < 0.04:
            return 0
        return rng.choice((10**4, 10**4, rng.randint(1, 3 * self.block_size)))

    def schedule(self) -> None:
        self.ops.append(Schedule(self.rng.choice(self.live), self.chunk()))

    def decode(self) -> None:
        rng = self.rng
        rid = rng.choice(self.live)
        for _ in range(rng.choice((1, 1, 2, 4, 8))):
            self.ops.append(Decode(rid, rng.randrange(VOCAB)))

    def preempt(self) -> None:
        self.ops.append(Preempt(self.rng.choice(self.live)))

    def finish(self) -> None:
        rid = self.rng.choice(self.live)
        self.live.remove(rid)
        self.ops.append(Finish(rid))

    def evict(self) -> None:
        rng = self.rng
        self.ops.append(Evict(tuple(rng.randrange(48) for _ in range(rng.randint(1, 3)))))

    def reset(self) -> None:
        if self.live and self.rng.random() < 0.6:  # mostly once every request is done
            for rid in self.live:
                self.ops.append(Finish(rid))
            self.live = []
        self.ops.append(Reset())


NAME = "kvmanager/5"
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes
# Each of this generator's profiles alone (`kvfuzz diff kvmanager --profile NAME`): a stream of
# its own name, so that input `index` of `seed` is a trace of that profile whatever the mix
# would have drawn there.
ALONE = {profile: TraceGenerator(f"{NAME}[{profile}]",
                                 functools.partial(build_profile, profile=profile),
                                 num_ops=200, max_fuzz_ops=200)
         for profile in ("scheduler", *PROFILES)}
