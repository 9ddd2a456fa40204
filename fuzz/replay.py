"""`kvfuzz replay`: run saved cases against implementations; one line per agreement, a full
report per divergence."""

from __future__ import annotations

import sys

from fuzz import corpus
from fuzz.engine import DIVERGE, OUTSIDE, check
from impl.registry import BUNDLED, implementations, resolve


def replay(paths, impl_specs, out=sys.stdout, device: str = "cpu") -> int:
    """Exit status: 0 every case agreed (or was outside the contract), 1 a divergence."""
    files = corpus.case_files(paths)
    cases = [(path, corpus.load(path)) for path in files]  # validate every file before running
    resolved = {}
    status = 0
    for path, case in cases:
        if case.target not in resolved:
            resolved[case.target] = _impls(case.target, impl_specs)
        for impl, fn in resolved[case.target]:
            outcome = check(impl.name, fn, case, device)
            if outcome.status == DIVERGE:
                status = 1
                outcome.divergence.saved_path = str(path)
                print(outcome.divergence.report(), file=out)
            elif outcome.status == OUTSIDE:
                kinds = ", ".join(v.kind for v in outcome.violations)
                print(f"outside contract  {path}  {impl.name}: {outcome.behaviour} ({kinds})",
                      file=out)
            else:
                print(f"ok                {path}  {impl.name}", file=out)
    print(f"replayed {len(cases)} case file(s): "
          f"{'divergence found' if status else 'no divergence'}", file=out)
    return status


def _impls(target: str, specs):
    chosen = [resolve(target, spec) for spec in specs] if specs else \
        implementations(target, BUNDLED)
    return [(impl, impl.load()) for impl in chosen]
