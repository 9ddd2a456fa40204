"""The detection benchmark's baseline for unified traces: the radix baseline's aimless traces
(`strategies.radix.uniform`, within what an implementation declares) for a cache with full
attention."""

from __future__ import annotations

import random

from kvfuzz.strategies.radix.uniform import uniform_trace as radix_trace
from kvfuzz.strategies.unified.trace import Trace, from_radix


def uniform_trace(rng: random.Random, preconditions=frozenset(), num_ops: int = 120) -> Trace:
    return from_radix(radix_trace(rng, preconditions, num_ops))
