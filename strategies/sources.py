"""Where generated inputs get their randomness: a `random.Random` seeded by (generator, seed,
index), or fuzzer bytes read through the same interface (`BytesRandom`), so that one generator
serves the seeded runs and atheris alike, never a copy of it.

`BytesRandom`: every method of `random.Random` draws from `getrandbits` or `random`; both read the
next bytes and read 0 once the bytes run out, which makes every later draw its simplest value and
ends any rejection loop. `random()` reads 2 bytes, not the 7 a full-precision float would: the
generators use it for weighted choices and coin flips, and at 7 bytes a fuzzer's input of 2 KB
ran out after some 50 trace ops (the detection benchmark showed byte-fed traces missing mutants
that seeded traces of 200 ops found at once).
"""

from __future__ import annotations

import functools
import random
from dataclasses import replace
from typing import Callable

from kvfuzz.strategies.inputs import Origin


def seeded_random(generator: str, seed: int, index: int) -> random.Random:
    # A string seed is hashed with SHA-512 by `random`: stable across Python versions and runs.
    return random.Random(f"{generator}:{seed}:{index}")


class BytesRandom(random.Random):
    def __init__(self, data: bytes):
        self._data, self._pos = bytes(data), 0
        super().__init__(0)

    def seed(self, *args, **kwargs) -> None:  # called by Random.__init__; the bytes are the seed
        super().seed(0)

    def getrandbits(self, k: int) -> int:
        width = (k + 7) // 8
        chunk = self._data[self._pos:self._pos + width]
        self._pos += width
        return int.from_bytes(chunk, "big") & ((1 << k) - 1) if chunk else 0

    def random(self) -> float:
        return self.getrandbits(16) / (1 << 16)

    def sample(self, population, k: int, *, counts=None) -> list:
        # `random.Random.sample` picks from a large population by redrawing until an index is
        # new: with the bytes run out every draw is 0 and that loop never ends. Pick from a
        # shrinking pool instead, which takes exactly k draws whatever they are.
        if counts is not None:
            return super().sample(population, k, counts=counts)
        pool = list(population)
        if not 0 <= k <= len(pool):
            raise ValueError("sample larger than population or is negative")
        picked = []
        for _ in range(k):
            picked.append(pool.pop(self._randbelow(len(pool))))
        return picked


class TraceGenerator:
    """A versioned trace generator `build(rng, num_ops) -> trace`: trace `index` of `seed` is the
    same forever (a change to what `build` makes must bump the version in `name`)."""

    def __init__(self, name: str, build: Callable, num_ops: int, max_fuzz_ops: int):
        self.name, self.build = name, build
        self.num_ops, self.max_fuzz_ops = num_ops, max_fuzz_ops

    def generate(self, seed: int, index: int, num_ops: int | None = None):
        rng = seeded_random(self.name, seed, index)
        return replace(self.build(rng, num_ops or self.num_ops),
                       origin=Origin(self.name, seed, index))

    def from_bytes(self, data: bytes):
        """The same generator with fuzzer bytes as its randomness: 1 to `max_fuzz_ops` ops."""
        rng = BytesRandom(data)
        return self.build(rng, 1 + rng.randrange(self.max_fuzz_ops))


@functools.cache
def misuse_stream(generator: TraceGenerator, all_misuse: frozenset,
                  unsupported: frozenset) -> TraceGenerator:
    """`generator`'s stream for an implementation that does not support the misuse kinds in
    `unsupported` (of `all_misuse`, what `generator.build(rng, num_ops, allowed=...)` may
    write): a generator of its own name, e.g. "mamba/1[no nested group begin]"; `generator`
    itself when nothing is left out."""
    left_out = unsupported & all_misuse
    if not left_out:
        return generator
    tags = ",".join(f"no {kind}" for kind in sorted(left_out))
    return TraceGenerator(f"{generator.name}[{tags}]",
                          functools.partial(generator.build, allowed=all_misuse - left_out),
                          generator.num_ops, generator.max_fuzz_ops)
