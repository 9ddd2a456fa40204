"""`kvfuzz replay`: run saved cases against implementations; one line per agreement, a full
report per divergence."""

from __future__ import annotations

import sys

from kvfuzz.fuzz import corpus
from kvfuzz.fuzz.engine import DIVERGE, OUTSIDE, check
from kvfuzz.impl.registry import BUNDLED, implementations, load_attribute, resolve


def replay(paths, impl_specs, out=None, device: str = "cpu") -> int:
    """Exit status: 0 every case agreed (or was outside the contract), 1 a divergence."""
    out = out or sys.stdout  # looked up now: a default bound at import outlives a redirect
    files = corpus.case_files(paths)
    # Validate every file before running any; files of plugin targets go to their replayer.
    loaded = [(path, corpus.load_any(path)) for path in files]
    cases = [(path, item) for path, item in loaded if not isinstance(item, tuple)]
    resolved = {}
    status = 0
    for path, item in loaded:
        if isinstance(item, tuple):
            target, data = item
            status = max(status, load_attribute(target.replay)(path, data, impl_specs, out))
    for path, case in cases:
        if case.target not in resolved:
            resolved[case.target] = _impls(case.target, impl_specs)
        for impl, fn in resolved[case.target]:
            outcome = check(impl, fn, case, device)
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
    print(f"replayed {len(loaded)} file(s): "
          f"{'divergence found' if status else 'no divergence'}", file=out)
    return status


def _impls(target: str, specs):
    chosen = [resolve(target, spec) for spec in specs] if specs else \
        implementations(target, BUNDLED)
    return [(impl, impl.load()) for impl in chosen]
