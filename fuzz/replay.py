"""`kvfuzz replay`: run saved inputs of any target against implementations; one line per
agreement, a full report per divergence."""

from __future__ import annotations

import sys

from kvfuzz.fuzz import corpus
from kvfuzz.fuzz.target import AGREE, OUTSIDE


def replay(paths, impl_specs, out=None, device: str = "cpu") -> int:
    """Exit status: 0 every input agreed (or was outside the contract, or a known difference),
    1 a divergence."""
    out = out or sys.stdout  # looked up now: a default bound at import outlives a redirect
    # Validate every file before running any.
    loaded = [(path, *corpus.load(path)) for path in corpus.input_files(paths)]
    chosen: dict[str, list] = {}
    status = 0
    for path, target, item in loaded:
        if target.name not in chosen:
            chosen[target.name] = [target.resolve(spec) for spec in impl_specs] or \
                target.bundled()
        for impl in chosen[target.name]:
            outcome = target.check(item, impl, device)
            if outcome.status == AGREE:
                print(f"ok                {path}  {impl.name}", file=out)
            elif outcome.status == OUTSIDE:
                print(f"outside contract  {path}  {impl.name}: {outcome.behaviour} "
                      f"({', '.join(outcome.outside)})", file=out)
            else:
                status = max(status, 0 if outcome.divergence.known else 1)
                outcome.divergence.saved_path = str(path)
                print(outcome.divergence.report(), file=out)
    print(f"replayed {len(loaded)} file(s): "
          f"{'divergence found' if status else 'no divergence'}", file=out)
    return status
