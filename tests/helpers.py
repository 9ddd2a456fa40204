"""Small helpers shared by tests: implementations by kind, and failing loudly with a report."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kvfuzz.fuzz import corpus
from kvfuzz.fuzz.report import Mismatch
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import BUNDLED, MUTANT, Implementation
from tests.conftest import CORPUS


def bundled(target: str):
    return TARGETS[target].bundled()


def mutants(target: str):
    return [impl for impl in TARGETS[target].implementations if impl.kind == MUTANT]


def divergence(target: str, item, impl):
    """The divergence (None: it agreed) of `impl` on `item`: a registered name, an import path,
    or an `Implementation`."""
    impl = TARGETS[target].resolve(impl) if isinstance(impl, str) else impl
    return TARGETS[target].check(item, impl).divergence


def double(target: str, path: str) -> Implementation:
    """A test's own implementation by import path, judged like a bundled one (an outside one's
    divergences may be classified as known upstream differences)."""
    return Implementation(path, target, path, "test double", BUNDLED)


def save_divergence(divergence) -> None:
    divergence.saved_path = str(corpus.save(TARGETS[divergence.target], divergence.input, CORPUS))


def fail_with(divergence, save: bool = True):
    """Save the failing input to the corpus (a regression test from now on) and fail with its
    report."""
    if save:
        save_divergence(divergence)
    raise Mismatch(divergence)


def run_property(prop, save: bool = True):
    """Run a hypothesis test whose failures raise `Mismatch`; save only the final, shrunk case
    (Hypothesis re-raises the minimal example last), never every example tried on the way."""
    try:
        prop()
    except Mismatch as mismatch:
        if save:
            save_divergence(mismatch.divergence)
        raise Mismatch(mismatch.divergence) from None


def assert_machine_catches(machine, impl_name: str, match: str, steps: int) -> None:
    """A hypothesis state machine run on a mutant fails with `match` (generation only: finding
    it is the claim, shrinking would take seconds more)."""
    broken = type("Broken", (machine,), {"impl_name": impl_name})
    with pytest.raises(AssertionError, match=match):
        run_state_machine_as_test(broken, settings=settings(
            max_examples=200, stateful_step_count=steps, deadline=None, database=None,
            phases=[Phase.generate]))
