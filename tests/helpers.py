"""Small helpers shared by tests: bundled implementations and failing loudly with a report."""

from __future__ import annotations

from kvfuzz.fuzz import corpus
from kvfuzz.fuzz.report import Mismatch
from kvfuzz.impl.registry import BUNDLED, MUTANT, implementations
from tests.conftest import CORPUS


def bundled(target: str):
    return implementations(target, BUNDLED)


def mutants(target: str):
    return implementations(target, MUTANT)


def fail_with(divergence, save: bool = True):
    """Save the failing case to the corpus (a regression test from now on) and fail with its report."""
    if save:
        divergence.saved_path = str(corpus.save(divergence.case, CORPUS))
    raise Mismatch(divergence)


def run_property(prop, save: bool = True):
    """Run a hypothesis test whose failures raise `Mismatch`; save only the final, shrunk case
    (Hypothesis re-raises the minimal example last), never every example tried on the way."""
    try:
        prop()
    except Mismatch as mismatch:
        if save:
            mismatch.divergence.saved_path = str(corpus.save(mismatch.divergence.case, CORPUS))
        raise Mismatch(mismatch.divergence) from None
