"""The detection benchmark's machinery (figures are printed by `kvfuzz bench detection`, never
asserted): the uniform baseline makes valid inputs of every target, a trial stops at the first
divergence and counts what it ran, and the tables say found/trials per cell."""

from __future__ import annotations

import random

import pytest

from kvfuzz.bench.detection import Trial, run_trial
from kvfuzz.bench.detection_report import tables
from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.targets import TARGETS
from tests.helpers import by_tier


@pytest.mark.parametrize("name", by_tier(TARGETS))
def test_uniform_inputs_are_valid_and_agree_on_a_bundled_implementation(name):
    target = TARGETS[name]
    if not target.catalogue.defaults():
        pytest.skip(f"{name}: {target.catalogue.not_run_reason()}")
    entry = target.catalogue.defaults()[0]
    for index in range(15):
        item = target.generator.uniform(random.Random(index), entry.preconditions)
        assert target.codec.from_json(target.codec.to_json(item), "uniform") == item
        assert target.check(item, entry).status == AGREE


@pytest.mark.parametrize("strategy", ["seeded", "uniform", "hypothesis"])
def test_a_trial_stops_at_the_first_divergence(strategy):
    # The time budget is far above what a trial takes, so that only the case budget can end it
    # (a loaded machine must not turn this into a timing test).
    trial = run_trial("decode", "mutant.inclusive_rank", strategy, 1, 600.0, 5000)
    assert trial.found and 1 <= trial.cases < 5000


def test_a_trial_that_finds_nothing_ends_at_its_budget():
    trial = run_trial("decode", "torch.vectorized", "seeded", 1, 600.0, 50)  # a correct one
    assert not trial.found and trial.cases == 50


def test_tables_give_medians_over_the_trials_that_found_it():
    results = [Trial("extend", "m", "seeded", 1, True, 10, 1.0),
               Trial("extend", "m", "seeded", 2, True, 30, 3.0),
               Trial("extend", "m", "uniform", 1, False, 100, 5.0),
               Trial("extend", "m", "uniform", 2, True, 50, 4.0)]
    text = tables(results, ["seeded", "uniform"], trials=2)
    assert "| m | 20 / 2.00 s (2/2) | 50 / 4.00 s (1/2) |" in text
    assert "**1/1**; 2.00 s | **0/1**; 4.00 s |" in text


@pytest.mark.parametrize("name", ["blockpool", "kvmanager", "offload"])
def test_a_target_of_released_code_alone_is_measured_on_its_every_mutant(name):
    """vLLM's targets have no implementation of kvfuzz's own: the table lists every mutant of
    the released classes (the configurations' mutants included, each reached by its profile's
    stream), none left to its tests alone; without vLLM, none (each needs it to run)."""
    from kvfuzz.bench.detection import mutants
    from tests.helpers import mutants as catalogued

    listed, every = mutants(name, quick=False), catalogued(name)
    expected = [m.name for m in every if m.available()]
    assert listed == expected and (not expected or len(listed) == len(every)), listed
    assert mutants(name, quick=True) == expected[:1]


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_uniform_inputs_keep_to_what_every_entry_declares(name):
    """Without running anything: the baseline made for an entry (upstream ones included) breaks
    none of its declared preconditions, or the detection benchmark would count inputs it never
    runs."""
    target = TARGETS[name]
    broken = getattr(target.judge, "broken", None)
    if broken is None or target.generator.uniform is None:
        pytest.skip(f"{name}: no declared preconditions to keep")
    for entry in target.catalogue.implementations:
        for index in range(10):
            item = target.generator.uniform(random.Random(index), entry.preconditions)
            assert broken(item, entry.preconditions) == [], (entry.name, index)
