"""Where a stream can take a share of the `kvmanager` mix (`strategies/kvmanager/streams.py`'s
`STREAMS`) by its rule: a range of the draw no stream takes yet, that none of the indices the
tests, CI, `kvfuzz mutate` and the corpus rely on draw, so each of those keeps its trace.

    python -m tests.kvmanager.mix_shares             # the open ranges, widest first
    python -m tests.kvmanager.mix_shares LOW HIGH    # what the range [LOW, HIGH) would take

`RELIED` was read 2026-12-06 from the tests (the quick tier, and the slow tier of tests/kvmanager
but `test_every_profile.py` (each profile's own stream), tests/engine, tests/fuzzing and
tests/bench/test_detection.py, run with every mix index they generate logged: seed 0's first 120
judged, guarded and searched for mutants, the mutants' pinned indices 126 to 423, seed 3's first
12, seed 7's first 20; `test_profiles.py`'s seeded run, seed 0's first 340, only needs every
profile among them), from `.ci/run` (`--start 500 --cases 10`; 3 since 2026-12-07, 500 to 509
kept) and from `kvfuzz mutate`'s default cases (seed 0's first 200, whose verdicts the docs
count); the corpus's origins in the mix are read from corpus/ each run. A test that pins a mix
index past these adds it here.
Standard library and kvfuzz only; no vllm needed.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from kvfuzz.strategies.kvmanager import streams
from kvfuzz.strategies.sources import seeded_random

# seed -> the mix indices something relies on
RELIED = {0: (*range(200), 203, 204, 205, 206, 242, 243, 244, 248, 367, 423, *range(500, 510)),
          3: tuple(range(12)), 7: tuple(range(20))}
CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def draw(seed: int, index: int) -> float:
    """The draw that picks input `index` of `seed`'s stream (`MixedStreams.stream`)."""
    return seeded_random(streams.MIX, seed, index).random()


def relied() -> dict[int, set[int]]:
    """`RELIED` and the corpus's cases whose origin is the mix's (`kvmanager/5` or a stream's
    name that the mix draws)."""
    names = {streams.generator.GENERATOR.name} | {s.name for s, _, _ in streams.STREAMS}
    found = {seed: set(indices) for seed, indices in RELIED.items()}
    for path in sorted(CORPUS.glob("kvmanager-*.json")):
        origin = json.loads(path.read_text()).get("origin")
        if isinstance(origin, dict) and origin.get("generator") in names:
            found.setdefault(origin["seed"], set()).add(origin["index"])
    return found


def free_ranges(table=streams.STREAMS) -> list[tuple[float, float]]:
    """The ranges of [0, 1) no stream takes (those draws are `kvmanager/5`'s)."""
    free, at = [], 0.0
    for low, high in sorted((low, high) for _, low, high in table):
        if low > at:
            free.append((at, low))
        at = max(at, high)
    return free + ([(at, 1.0)] if at < 1.0 else [])


def open_ranges() -> list[tuple[float, float]]:
    """The parts of the free ranges that no relied-on index draws, widest first, their bounds
    to 4 decimals as `STREAMS` writes them (a low bound just above the draw it starts after)."""
    draws = sorted(draw(seed, index) for seed, indices in relied().items() for index in indices)
    found = []
    for low, high in free_ranges():
        inside = [d for d in draws if low <= d < high]
        starts = [low] if not inside or inside[0] > low else []
        starts += [math.floor(d * 1e4 + 1) / 1e4 for d in inside]
        ends = [math.floor(d * 1e4) / 1e4 for d in inside] + [high]
        found += [(a, b) for a, b in zip(starts, ends[len(ends) - len(starts):]) if b > a]
    return sorted(found, key=lambda r: r[0] - r[1])


def takes(low: float, high: float, seed: int = 0, first: int = 300) -> list[int]:
    """The indices of `seed`'s first `first` that a share [low, high) takes."""
    return [index for index in range(first) if low <= draw(seed, index) < high]


def clashes(low: float, high: float) -> dict[int, list[int]]:
    """The relied-on indices, by seed, that a share [low, high) would take (none where the
    rule holds)."""
    found = {seed: sorted(i for i in indices if low <= draw(seed, i) < high)
             for seed, indices in relied().items()}
    return {seed: indices for seed, indices in found.items() if indices}


def main(argv: list[str]) -> None:
    if argv:
        low, high = map(float, argv)
        taken = [(s.name, a, b) for s, a, b in streams.STREAMS if a < high and low < b]
        print(f"[{low}, {high}): seed 0's first 300 taken: {takes(low, high)}; relied-on "
              f"indices drawn: {clashes(low, high) or 'none'}; streams there: {taken or 'none'}")
        return
    for low, high in open_ranges():
        if high - low >= 0.002:
            print(f"[{low:.4f}, {high:.4f})  {100 * (high - low):.2f}%  seed 0's first 300: "
                  f"{takes(low, high)}")


if __name__ == "__main__":
    main(sys.argv[1:])
