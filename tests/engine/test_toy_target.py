"""A new trace target is its parts and one row of the table: the toy counter of `toy_target.py`,
added to `TARGETS` and nowhere else, is found by `kvfuzz list`, diffed, its divergence shrunk,
saved and replayed, checked by the Python API and its public Hypothesis strategy, fuzzed by the
atheris harness, measured by the detection benchmark's seeded and Hypothesis strategies, and
its worst input goes to the memory test.

Not derived yet (issue 20's remaining steps): `kvfuzz fuzz` campaigns need the target's atheris
entry script, and the detection benchmark's uniform baseline a generator of its own."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings

import kvfuzz
from kvfuzz.bench.detection import run_trial
from kvfuzz.fuzz import corpus
from kvfuzz.fuzz.harness import DifferentialHarness
from kvfuzz.fuzz.report import Mismatch
from kvfuzz.fuzz.target import AGREE
from kvfuzz.fuzz.targets import TARGETS
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


@pytest.mark.parametrize("strategy", ["seeded", "hypothesis"])
def test_the_detection_benchmark_measures_it(toy, strategy):
    trial = run_trial("toy", MUTANT, strategy, 1, 30.0, 500)
    assert trial.found and trial.cases < 500


def test_its_worst_input_joins_the_memory_test(toy, tmp_path):
    [path] = [p for p in _worst_cases(tmp_path) if p.name == "toy.json"]
    assert json.loads(path.read_text())["format"] == toy_target.FORMAT
    assert kvfuzz_here("replay", path).returncode == 0
