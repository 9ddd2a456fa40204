"""Shrinking, for every target: the smallest input found that still fails the same way (same
divergence signature), within the target's budget of re-runs and seconds.

Greedy over the candidates of the target's shrinker part, kept when smaller by its `size` and
still failing. After a success the next pass tries the target's first
candidate again (its most promising cut) and then resumes where the last success was, so a run
of similar cuts costs one pass, not one pass each; it stops after a full pass finds nothing.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Iterator, Sequence

from kvfuzz.fuzz.engine.report import Divergence


def shrink(target, divergence: Divergence, device: str = "cpu", stopping=lambda: False,
           budget: tuple[int, float] | None = None, check=None) -> Divergence:
    """The divergence on the smallest failing input found. A shrunk input loses its origin (it
    was not generated); its note and the report's `original` line say where it came from.
    `check(target, item, impl, device)`: how to run a candidate (default: in this process; the
    commands pass a supervised worker's, as a candidate may crash or hang)."""
    check = check or (lambda target, item, impl, device: target.check(item, impl, device))
    if divergence.crash in ("timeout", "memory"):
        # Every try that still hangs would cost the whole timeout; memory held past the limit
        # may have grown over earlier inputs, which a candidate checked alone does not repeat.
        return divergence
    impl = divergence.implementation or target.catalogue.resolve(divergence.impl)
    shrinker = target.shrinker
    max_calls, max_seconds = budget or shrinker.budget
    deadline, calls = time.monotonic() + max_seconds, 0
    best, resume = divergence, 0

    def exhausted() -> bool:
        return calls >= max_calls or time.monotonic() > deadline or stopping()

    while not exhausted():
        found, size = None, shrinker.size(best.input)
        for position, candidate in _in_order(shrinker.candidates(best.input, best), resume):
            if exhausted():
                break
            if shrinker.size(candidate) >= size:
                continue
            calls += 1
            again = check(target, candidate, impl, device).divergence
            if again is not None and again.signature == divergence.signature:
                found, resume = again, position
                break
        if found is None:
            break
        best = found
    if best is divergence:
        return divergence
    return _provenance(target, divergence, best.input, impl, device, check) or divergence


def _in_order(candidates: Iterator, resume: int) -> Iterator[tuple[int, object]]:
    """(position, candidate): the first, then from `resume` on, then those between, each built
    only when reached (a long trace has thousands of cuts; a pass usually ends at one of the
    first it tries)."""
    skipped = []
    for position, candidate in enumerate(candidates):
        if 0 < position < resume:
            skipped.append(candidate)
        else:
            yield position, candidate
    yield from enumerate(skipped, start=1)


def _provenance(target, original: Divergence, small, impl, device: str,
                check) -> Divergence | None:
    source = original.input.origin.describe() if original.input.origin else \
        f"{original.noun} {original.input_id}"
    note = f"shrunk from {source}, {target.shrinker.size_text(original.input)}"
    small = replace(small, origin=None, note=note)
    result = check(target, small, impl, device).divergence
    if result is not None:
        result.original = target.regenerate_command(original.input, original.impl)
    return result


def without_chunks(items: Sequence) -> Iterator[tuple]:
    """`items` with a run removed: halves first, then quarters, ... down to single items."""
    items = tuple(items)
    chunk = len(items) // 2
    while chunk >= 1:
        for start in range(0, len(items), chunk):
            yield items[:start] + items[start + chunk:]
        chunk //= 2
