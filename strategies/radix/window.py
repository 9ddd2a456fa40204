"""Seeded pure-SWA radix traces (`radix-window/1`): the radix stream (`generator.py`: prompt
families, chunked prefill with checkpoints, probes, load-back inserts, evictions, every policy,
events on and off) at page size 1 (SGLang's pure-SWA allocator has no pages), with a sliding
window of 1 to 6 tokens and outputs longer than it, so that decode steps slide the window past
the prompt and free slots a finish, a mid-decode checkpoint or an eviction then meets.
Prefill-aware (each prefill chunk sets the request's eviction floor), as the one model of
SGLang 0.5.23 that runs a pure-SWA cache with a floor does. Trace `index` of `seed` is the same
forever; a change to what this produces must bump the version."""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.radix.generator import ALL_MISUSE, GENERATOR, _Generator
from kvfuzz.strategies.radix.trace import POLICIES, Trace
from kvfuzz.strategies.sources import TraceGenerator, misuse_stream

WINDOWS = (1, 2, 3, 4, 6)


class _WindowGenerator(_Generator):
    """The radix generator whose requests decode past their window: each admission's outputs
    get up to two windows and four tokens more."""

    def __init__(self, rng: random.Random, allowed: frozenset, window: int):
        super().__init__(rng, 1, allowed)
        self.window = window

    def admit(self) -> None:
        at = len(self.ops)
        super().admit()
        admit = self.ops[at]
        more = tuple(self.sequence(self.rng.randint(0, 2 * self.window + 4)))
        self.ops[at] = replace(admit, tokens=admit.tokens + more)
        self.live[admit.rid][1] += len(more)
        self.done[-1] = self.done[-1] + more


def build(rng: random.Random, num_ops: int, allowed: frozenset = ALL_MISUSE) -> Trace:
    window = rng.choice(WINDOWS)
    size = rng.choice((rng.randint(6, 12), rng.randint(12, 32), rng.randint(32, 64)))
    gen = _WindowGenerator(rng, allowed, window)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(1, size, rng.choice(POLICIES), rng.random() < 0.5, tuple(gen.ops[:num_ops]),
                 swa_window=window, prefill_aware=True)


NAME = "radix-window/1"
WINDOW_GENERATOR = TraceGenerator(NAME, build, num_ops=GENERATOR.num_ops,
                                  max_fuzz_ops=GENERATOR.max_fuzz_ops)


def generator_for(unsupported: frozenset) -> TraceGenerator:
    """The window stream for an implementation that does not support the misuse in
    `unsupported`, e.g. "radix-window/1[no reset with requests in flight]"."""
    return misuse_stream(WINDOW_GENERATOR, ALL_MISUSE, unsupported)


def window_traces(max_bytes: int = 4096):
    """A Hypothesis strategy of window traces: the stream fed by up to `max_bytes` drawn bytes
    (`kvfuzz.radix_traces()` draws the radix stream's)."""
    from kvfuzz.strategies.hypothesis_traces import traces  # imports hypothesis

    return traces(WINDOW_GENERATOR.from_bytes, max_bytes)
