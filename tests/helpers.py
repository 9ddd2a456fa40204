"""Small helpers shared by tests: implementations by kind, failing loudly with a report, and
the `kvfuzz` command run in this process."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import MUTANT, OURS, Implementation, ImplementationError
from tests.bars import bar
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
    it is the claim, shrinking would take seconds more). Derandomized in every profile: with
    random draws the compaction machine missed `p2v_not_cleared` about one run in eight."""
    broken = type("Broken", (machine,), {"impl_name": impl_name})
    with pytest.raises(AssertionError, match=match):
        run_state_machine_as_test(broken, settings=settings(
            max_examples=200, stateful_step_count=steps, deadline=None, database=None,
            derandomize=True, phases=[Phase.generate]))


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
    """A diff summary's row per implementation: [cases, agree, outside, diverged, rate], with
    `findings` before the rate after --keep-going."""
    rows, inside = {}, False
    for line in err.splitlines():
        inside = inside or line.startswith("summary: ")
        words = line.split()
        if inside and len(words) in (6, 7) and words[1].replace(",", "").isdigit():
            rows[words[0]] = words[1:]
    return rows


# What each engine's tests need: the engine and a light dependency that only its part of the lock
# brings (looked up, never imported; `kvfuzz upstream fetch` brings both).
ENGINE_PACKAGES = {"sglang": ("sglang", "transformers"), "vllm": ("vllm", "xgrammar")}
ENGINE_DOCS = {"sglang": "kvfuzz upstream fetch, docs/upstream-sglang.md",
               "vllm": "kvfuzz upstream fetch, docs/upstream-vllm.md"}


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


def with_engine(engine: str):
    """A decorator giving one test `needs_engine(engine)`'s marks, in a module whose other tests
    need no engine."""
    def marked(test):
        for mark in needs_engine(engine):
            test = mark(test)
        return test
    return marked


def agreeing_features(target: str, impl, inputs) -> Counter:
    """The features (edge classes, configurations, marks) counted over `inputs`, each of which
    must agree with `impl` to its last op: a divergence fails with its report."""
    owner, events = TARGETS[target], Counter()
    for item in inputs:
        outcome = owner.check(item, impl)
        assert outcome.status == "agree", outcome.divergence and outcome.divergence.report()
        events.update(outcome.features)
    return events


def made_and_with_draw_off(monkeypatch, module, generator, count: int) -> tuple[list, list]:
    """Seed 0's first `count` inputs of `generator` as made, and as made with `module`'s draw
    off (its `SHARE` 0): what a draw made after every other must leave alone."""
    made = [generator.generate(0, index) for index in range(count)]
    with monkeypatch.context() as patched:
        patched.setattr(module, "SHARE", 0.0)
        off = [generator.generate(0, index) for index in range(count)]
    return made, off


def without_align_caching_check(monkeypatch) -> None:
    """The Mamba "align" reduced mode with its caching check (`align_caching.py`) off: it sees a
    misplaced checkpoint's entry first, so a test of another check's catch turns it off."""
    from kvfuzz.fuzz.kvmanager.align import AlignLockstep

    monkeypatch.setattr(AlignLockstep, "caching_problems", lambda *args: [])


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


def assert_seeded_traces_agree(target: str, impl, indices) -> list:
    """Seeded inputs `indices` of seed 0 (those `impl` supports) all run to the end, agreeing;
    a divergence fails with its report, its input saved to the corpus. Each one's edge classes
    (`features`), in order."""
    owner, features = TARGETS[target], []
    for index in indices:
        outcome = owner.check(owner.generator.generate(0, index, [impl]), impl)
        if outcome.status != "agree":
            assert outcome.divergence is not None, outcome.outside
            fail_with(outcome.divergence)
        features.append(outcome.features)
    return features


def assert_corpus_replays_clean(target: str, impl, outside_allowed: bool = False) -> int:
    """Every committed corpus file of `target` agrees on `impl` (or is outside its contract,
    where allowed); the number that agreed."""
    owner, agreed = TARGETS[target], 0
    for path in corpus.input_files([CORPUS]):
        if not path.name.startswith(f"{target}-"):
            continue
        outcome = owner.check(corpus.load(path)[1], impl)
        if outcome.status == "diverge" or (outcome.status != "agree" and not outside_allowed):
            outcome.divergence.saved_path = str(path)
            fail_with(outcome.divergence, save=False)
        agreed += outcome.status == "agree"
    return agreed


def assert_caught_with_a_shrunk_report(target: str, name: str, pattern: str, original: str,
                                       found=None, max_ops: int | None = None, first: int = 0):
    """Mutant `name` diverges on one of 60 seeded traces from index `first` (or `found`);
    shrunk, the report names the implementation, the op and its call, where the trace was shrunk
    from, the replay line, and matches `pattern`; the shrunk trace read back from its file fails
    the same way, and `original` (what the mutant was made from) agrees on it."""
    import re

    from kvfuzz.fuzz.engine.shrink import shrink

    owner = TARGETS[target]
    impl = owner.catalogue.resolve(name)
    if not impl.available():
        pytest.skip(f"needs {impl.requires} installed (see docs/upstream-{impl.requires}.md)")
    traces = (owner.generator.generate(0, i, [impl]) for i in range(first, first + 60))
    found = found or next((d for d in (divergence(target, t, impl) for t in traces) if d), None)
    assert found is not None, f"{name}: no divergence in 60 seeded traces"
    small = shrink(owner, found, budget=(3000, 10.0))
    report = small.report()
    assert report.startswith(f"DIVERGENCE  {target}  implementation {name}")
    assert " at op " in report and "\n  call      " in report
    assert f"kvfuzz replay corpus/{owner.file_name(small.input)} --impl {name}" in report
    pick = getattr(owner.generator, "generator_for", None)  # the stream the entry's profile gets
    generator = re.escape((pick([impl]) if pick else owner.generator.generator).name
                          .split("[")[0])
    assert re.search(rf"shrunk from generator {generator}(\[[^]]+\])?, seed 0", report), report
    assert re.search(pattern, report), report
    assert max_ops is None or len(small.input.ops) <= max_ops, report
    again = divergence(target, loads(dumps(small.input, target)), name)
    assert again is not None and again.signature == small.signature
    assert owner.check(small.input, owner.catalogue.resolve(original)).status == "agree"
    return small


def mutant_tests(target: str, expected: dict, original, first: dict | None = None, **options):
    """The two tests of a target's mutant catalogue: every mutant has an expected report
    pattern, and each is caught with a readable shrunk report
    (`assert_caught_with_a_shrunk_report`; `original(name)`: what it was made from;
    `first[name]`: the seeded index its search starts at, where the traces before it are
    known to reach nothing of the mutant's and cost CI time)."""
    def test_every_mutant_has_an_expectation():
        assert sorted(expected) == sorted(m.name for m in mutants(target))

    @pytest.mark.parametrize("name", by_tier(sorted(expected)))
    def test_mutant_is_caught_with_a_readable_shrunk_report(name):
        assert_caught_with_a_shrunk_report(target, name, expected[name], original(name),
                                           first=(first or {}).get(name, 0), **options)
    return test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report


def assert_wrong_shape_is_one_line(target: str, path: str, shows: str, interface: str):
    """An outside implementation of the wrong shape (`path`) is refused in one line that says
    what is wrong (`shows`) and what the target calls (`interface`)."""
    from kvfuzz.impl.registry import ImplementationError

    with pytest.raises(ImplementationError) as error:
        TARGETS[target].catalogue.resolve(path)
    message = str(error.value)
    assert shows in message and interface in message and "\n" not in message, message


def undeclared(path: str):
    """The released class at `path` under another name: no catalogue entry, so none of its
    entry's declared preconditions (built on first use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    return _undeclared(path, load_attribute(path))


@functools.cache
def _undeclared(path: str, base: type) -> type:
    return type("Undeclared", (base,), {"__doc__": f"{path} with nothing declared"})


def seeded_tests(target: str, impl_name: str, reach: int):
    """The two seeded tests of a trace target's own implementation, each trace judged once: the
    first `reach` traces agree and reach every event its judge counts (the edge classes), and the
    rest of 2,000 agree (`slow`, in 4 shards of 500; CI runs the first: `tests/bars.py`)."""
    def judged(indices) -> Counter:
        impl = TARGETS[target].catalogue.resolve(impl_name)
        return sum(map(Counter, assert_seeded_traces_agree(target, impl, indices)), Counter())

    @pytest.mark.slow
    @pytest.mark.parametrize("shard", range(bar(4)))
    def test_it_agrees_on_2000_seeded_traces(shard):
        judged(range(max(reach, shard * 500), (shard + 1) * 500))

    def test_the_first_seeded_traces_agree_and_reach_every_edge_class():
        declared, events = set(TARGETS[target].judge.lockstep.EVENTS), judged(range(reach))
        assert declared <= set(events), sorted(declared - set(events))
    return (test_it_agrees_on_2000_seeded_traces,
            test_the_first_seeded_traces_agree_and_reach_every_edge_class)


def assert_refused_in_one_line(target: str, path: str, shows: str, interface: str) -> None:
    """An outside implementation of the wrong shape is refused before anything runs, in one line
    that says what is wrong (`shows`) and names the interface the target calls."""
    with pytest.raises(ImplementationError) as error:
        TARGETS[target].catalogue.resolve(path)
    message = str(error.value)
    assert shows in message and interface in message and "\n" not in message, message


def mutant_module(module_name: str, mutant_id: str):
    """The released module `module_name` with `kvfuzz mutate`'s mutant `mutant_id` applied,
    compiled under a name of its own beside the released one (whose file it keeps, so the
    mutant's line numbers are the release's)."""
    import importlib
    import sys
    import types

    from kvfuzz.fuzz.engine.mutation.mutants import apply, enumerate_mutants
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import(module_name):
        released = importlib.import_module(module_name)
    source = open(released.__file__).read()
    mutant = next(m for m in enumerate_mutants(module_name, released.__file__, source)
                  if m.id == mutant_id)
    name = f"{module_name}_mutant"
    module = types.ModuleType(name)
    sys.modules[name] = module  # (dataclasses look their module up)
    try:
        exec(compile(apply(source, mutant)[0], released.__file__, "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


def walked(traces, walk) -> Counter:
    """What `walk(trace)` counts over `traces` (each walk's (counts, problems)), every trace
    free of problems: a profile's shape checked trace by trace."""
    made = Counter()
    for trace in traces:
        counts, problems = walk(trace)
        assert problems == [], (trace.origin, problems[:5])
        made.update(counts)
    return made
