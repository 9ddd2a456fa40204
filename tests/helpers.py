"""Small helpers shared by tests: implementations by kind, failing loudly with a report, and
the `kvfuzz` command run in this process."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from dataclasses import dataclass

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import MUTANT, OURS, Implementation
from tests.conftest import CORPUS


def bundled(target: str):
    return TARGETS[target].catalogue.defaults()


def engine_of(value) -> str | None:
    """The upstream engine a test parameter runs, or None: an `Implementation`, an
    implementation's or a target's name (a target whose bundled implementations are upstream's,
    as vLLM's are), or a corpus file of such a target."""
    if isinstance(value, Implementation):
        return value.requires
    name = value.name.split("-")[0] if hasattr(value, "suffix") else value
    if name in TARGETS:
        return next((impl.requires for impl in TARGETS[name].catalogue.implementations
                     if impl.runs_by_default and impl.requires), None)
    for target in TARGETS.values():
        for impl in target.catalogue.implementations:
            if impl.name == name:
                return impl.requires
    return None


def by_tier(values, ids=None) -> list:
    """Test parameters, those that run an upstream engine (`engine_of`) in the slow tier: the
    quick tier never imports SGLang or vLLM (some 10 and 15 s of CPU in every pytest worker)."""
    return [pytest.param(value, marks=pytest.mark.slow, id=ids(value) if ids else None)
            if engine_of(value) else value for value in values]


def mutants(target: str):
    return [impl for impl in TARGETS[target].catalogue.implementations if impl.kind == MUTANT]


def divergence(target: str, item, impl):
    """The divergence (None: it agreed) of `impl` on `item`: a registered name, an import path,
    or an `Implementation`."""
    impl = TARGETS[target].catalogue.resolve(impl) if isinstance(impl, str) else impl
    return TARGETS[target].check(item, impl).divergence


def double(target: str, path: str) -> Implementation:
    """A test's own implementation by import path, judged like a bundled one (an outside one's
    divergences may be classified as known upstream differences)."""
    return Implementation(path, target, path, "test double", OURS)


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


@dataclass
class Ran:
    """A `kvfuzz` command's exit status and output, as `subprocess.run` would give them."""

    returncode: int
    stdout: str
    stderr: str


def kvfuzz_here(*args) -> Ran:
    """The command in this process (its workers are forked from it): what a user sees, without
    the seconds a fresh interpreter and torch cost. The slow tier runs it as a process too."""
    from kvfuzz.fuzz.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([str(arg) for arg in args])
        except SystemExit as stop:  # argparse's usage errors
            status = stop.code
    return Ran(status, out.getvalue(), err.getvalue())


def summary_rows(err: str) -> dict[str, list[str]]:
    """A diff summary's row per implementation: [cases, agree, outside, diverged, rate]."""
    rows, inside = {}, False
    for line in err.splitlines():
        inside = inside or line.startswith("summary: ")
        words = line.split()
        if inside and len(words) == 6 and words[1].replace(",", "").isdigit():
            rows[words[0]] = words[1:]
    return rows


# What each engine's tests need installed: the engine and a light dependency that only its
# requirements file brings (looked up, never imported).
ENGINE_PACKAGES = {"sglang": ("sglang", "transformers"), "vllm": ("vllm", "xgrammar")}
ENGINE_DOCS = {"sglang": "requirements-upstream.txt, docs/upstream-sglang.md",
               "vllm": "requirements-vllm.txt, docs/upstream-vllm.md"}


def needs_engine(engine: str):
    """Marks: skip unless `engine` and its requirements are installed, decided without importing it
    (and the slow tier):
    importing vLLM or SGLang at collection cost every pytest worker 20 to 30 s, in every tier.
    Tests import the engine when they run; test doubles that subclass its classes are built on
    first use (a module `__getattr__`)."""
    missing = [name for name in ENGINE_PACKAGES[engine] if importlib.util.find_spec(name) is None]
    return [pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed "
                                                     f"({ENGINE_DOCS[engine]})"),
            pytest.mark.slow]  # the quick tier never imports an engine (`by_tier`)


def dumps(item, target: str | None = None) -> str:
    """`item` as its target writes a corpus file (any target of its format: they share it)."""
    owner = TARGETS[target] if target else next(
        t for t in TARGETS.values() if t.codec.format == _format_of(item))
    return owner.dumps(item)


def loads(text: str, source: str = "test"):
    """A corpus file's text read back, as `kvfuzz replay` reads it (the input alone)."""
    return corpus.loads(text, source)[1]


def _format_of(item) -> str:
    module = __import__(type(item).__module__, fromlist=["FORMAT"])
    return module.FORMAT
