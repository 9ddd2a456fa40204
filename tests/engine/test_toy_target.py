"""A new trace target is its parts and one row of the table: the toy counter of `toy_target.py`,
added to `TARGETS` and nowhere else, is found by `kvfuzz list`, diffed, its divergence shrunk,
saved and replayed, checked by the Python API and its public Hypothesis strategy, fuzzed by the
atheris harness through the one entry script every campaign runs, measured by the detection
benchmark (its uniform baseline column left out: the toy's generator declares none), and its
worst input goes to the memory test."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings

import kvfuzz
from kvfuzz.bench.detection import run_trial
from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.campaign.harness import DifferentialHarness
from kvfuzz.fuzz.campaign.specs import ENTRY, SPECS
from kvfuzz.fuzz.engine.report import Mismatch
from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import OURS, Implementation
from kvfuzz.strategies.sources import TraceGenerator
from tests.engine import toy_target
from tests.engine.test_bad_input import _worst_cases
from tests.helpers import kvfuzz_here, summary_rows

MUTANT = "mutant.toy.reset_keeps_one"


@pytest.fixture
def toy(monkeypatch):
    """The one row: workers are forked from this process, so they see the table too."""
    monkeypatch.setitem(TARGETS, "toy", toy_target.TOY)
    return toy_target.TOY


def test_list_and_a_clean_diff_find_it(toy, tmp_path):
    assert "toy:" in kvfuzz_here("list").stdout
    ran = kvfuzz_here("diff", "toy", "--cases", 40, "--jobs", 2, "--corpus", tmp_path)
    assert ran.returncode == 0, ran.stderr
    cases, agree, *_ = summary_rows(ran.stderr)["toy.counter"]
    assert cases == agree == "40"


def test_a_mutant_is_found_shrunk_saved_and_replayed(toy, tmp_path):
    ran = kvfuzz_here("diff", "toy", "--impl", MUTANT, "--cases", 40, "--corpus", tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert f"DIVERGENCE  toy  implementation {MUTANT}" in ran.stderr
    assert "what      total at op" in ran.stderr and "shrunk from generator toy/1" in ran.stderr
    [saved] = list(tmp_path.iterdir())
    small = corpus.load(saved)[1]
    assert saved.name.startswith("toy-") and len(small.ops) <= 3, small
    assert kvfuzz_here("replay", saved, "--impl", MUTANT).returncode == 1
    assert kvfuzz_here("replay", saved).returncode == 0  # the bundled counter agrees


def test_the_python_api_and_the_public_strategy(toy):
    result = kvfuzz.diff("toy", toy_target.Counter, cases=20)
    assert result.status == 0 and [t.cases for t in result.tallies.values()] == [20]
    assert "toy_traces" in kvfuzz.__all__

    @settings(max_examples=20, deadline=None, database=None)
    @given(kvfuzz.toy_traces())
    def agrees(trace):
        assert kvfuzz.check("toy", trace, toy_target.Counter).status == AGREE

    agrees()


def test_the_atheris_harness_fuzzes_it(toy, tmp_path, monkeypatch):
    monkeypatch.setenv("KVFUZZ_FOUND", str(tmp_path))
    monkeypatch.setenv("KVFUZZ_IMPL", MUTANT)
    harness = DifferentialHarness(toy)
    with pytest.raises(Mismatch):
        for seed in range(50):
            harness.test_one_input(random.Random(seed).randbytes(64))
    assert [p.name[:4] for p in tmp_path.iterdir()] == ["toy-"]


def test_a_campaign_runs_it_through_the_one_entry_script(toy):
    spec = SPECS["toy"]
    assert "toy" in SPECS and spec.command == [str(ENTRY), "toy"]
    assert spec.default_impls() == ["toy.counter"]
    seeds = list(spec.seeds([]))
    assert len(seeds) == 16 and {len(s) for s in seeds} == {1024}  # a trace target's settings


@pytest.mark.parametrize("strategy", ["seeded", "hypothesis"])
def test_the_detection_benchmark_measures_it(toy, strategy):
    trial = run_trial("toy", MUTANT, strategy, 1, 30.0, 500)
    assert trial.found and trial.cases < 500


def test_the_benchmark_leaves_out_the_uniform_baseline_it_does_not_declare(toy, monkeypatch):
    import kvfuzz.bench.detection as detection

    monkeypatch.setattr(detection, "ProcessPoolExecutor", _InProcess)
    trials = detection.run_all(["toy"], ["seeded", "uniform"], 1, 10.0, 200, True, 1,
                               progress=lambda line: None)
    assert [t.strategy for t in trials] == ["seeded"] and trials[0].found


class _InProcess:
    """ProcessPoolExecutor's shape, running each task here (the toy row is in this process)."""

    def __init__(self, max_workers):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args):
        from concurrent.futures import Future

        future = Future()
        future.set_result(fn(*args))
        return future


def test_its_worst_input_joins_the_memory_test(toy, tmp_path):
    [path] = [p for p in _worst_cases(tmp_path) if p.name == "toy.json"]
    assert json.loads(path.read_text())["format"] == toy_target.FORMAT
    assert kvfuzz_here("replay", path).returncode == 0


NO_RESET = "never reset"


def test_two_entries_of_one_class_are_each_checked_as_they_declare(toy, monkeypatch, tmp_path):
    """Two catalogue entries may name one class (offload: vLLM's manager with each policy): in a
    worker they share the class's process, and each input is checked there as the entry it was
    asked for declares (its preconditions), not as the entry that started the process."""
    quiet = Implementation("toy.counter.quiet", "toy", toy_target.IMPLEMENTATIONS[0].path,
                           "the counter, never reset", OURS, preconditions=(NO_RESET,))
    no_resets = TraceGenerator("toy/1[no reset]", lambda rng, n: toy_target.Trace(
        tuple(toy_target.Add(rng.randrange(6)) for _ in range(n))), 30, 60)
    twin = replace(
        toy, catalogue=replace(toy.catalogue, implementations=(quiet, *toy.catalogue
                                                               .implementations)),
        generator=replace(toy.generator, pick=lambda impls: no_resets if any(
            NO_RESET in impl.preconditions for impl in impls) else toy_target.GENERATOR),
        judge=replace(toy.judge, broken=lambda item, preconditions: [NO_RESET] if (
            NO_RESET in preconditions and any(isinstance(op, toy_target.Reset)
                                              for op in item.ops)) else []))
    monkeypatch.setitem(TARGETS, "toy", twin)
    ran = kvfuzz_here("diff", "toy", "--cases", 60, "--jobs", 1, "--corpus", tmp_path)
    assert ran.returncode == 0, ran.stderr
    rows = summary_rows(ran.stderr)
    assert rows["toy.counter.quiet"][:2] == rows["toy.counter"][:2] == ["60", "60"], rows
