"""CI's seeded `kvmanager` traces per configuration (`ci_configs.py`, issue 24): the pinned
counts of `test_every_profile.py`'s shards reach, in each mode, its traces for every
configuration the lock step names but the exempt ones (500 in CI, 2,000 nightly), and the
table pins exactly the shards that run in either mode. No vLLM needed: the counts are read from
ci_configs.json, which each shard checks against its run."""

from __future__ import annotations

from collections import Counter

import pytest

from kvfuzz.fuzz.kvmanager.configs import CONFIGS
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from tests.kvmanager import ci_configs


@pytest.mark.parametrize("mode", sorted(ci_configs.WANTED))
def test_every_configuration_runs_its_modes_traces(mode):
    pinned = ci_configs.pinned_for(ci_configs.load_pinned(), KVMANAGER.profiles(), mode)
    assert ci_configs.short_of(pinned, CONFIGS, ci_configs.WANTED[mode]) == {}
    assert set(ci_configs.EXEMPT) <= set(CONFIGS)  # an exemption names a configuration


def test_the_pinned_table_names_every_shard_that_runs_and_nothing_else():
    keys = {ci_configs.shard_key(*shard, mode) for mode in ci_configs.WANTED
            for shard in ci_configs.shards(KVMANAGER.profiles(), mode)}
    assert set(ci_configs.load_pinned()) == keys


@pytest.mark.parametrize("mode", sorted(ci_configs.WANTED))
def test_a_configuration_short_of_its_modes_traces_is_named_with_its_sum(mode):
    # the check can fail: one trace fewer of the least-covered configuration is reported
    wanted = ci_configs.WANTED[mode]
    pinned = {key: dict(counts) for key, counts in ci_configs.pinned_for(
        ci_configs.load_pinned(), KVMANAGER.profiles(), mode).items()}
    total = {name: sum(counts.get(name, 0) for counts in pinned.values()) for name in CONFIGS}
    name = min((n for n in CONFIGS if n not in ci_configs.EXEMPT), key=total.get)
    key = next(key for key, counts in pinned.items() if counts.get(name))
    pinned[key][name] -= total[name] - wanted + 1
    assert ci_configs.short_of(pinned, CONFIGS, wanted) == {name: wanted - 1}


def test_the_top_ups_run_only_traces_of_their_configurations_before_their_stops():
    stream = KVMANAGER.alone("async").generator
    traces = [stream.generate(0, index) for index in range(1500, 1520)]
    carry = [trace.retained > 0 for trace in traces]
    assert any(carry) and not all(carry)
    rules = (("extra retained tokens", 1510),)
    ran = [ci_configs.runs(t, 1500 + i, rules) for i, t in enumerate(traces)]
    assert ran == carry[:10] + [False] * 10  # past its stop a configuration runs nothing
    assert all(ci_configs.runs(t, 1500 + i, ()) for i, t in enumerate(traces))


@pytest.mark.parametrize("mode", sorted(ci_configs.WANTED))
def test_each_top_up_shard_carries_the_stops_that_reach_into_it(mode):
    for profile, first, stop, rules in ci_configs.top_up_shards(mode):
        stops = ci_configs.TOP_UPS[mode][profile]
        assert rules and all(stops[name] == end > first for name, end in rules)
        assert set(stops) - {name for name, _ in rules} == {
            name for name, end in stops.items() if end <= first}
        assert ci_configs.BASE <= first < stop <= max(stops.values())


def test_cis_traces_are_the_first_of_a_nightly_runs():
    for profile, stops in ci_configs.CI_TOP_UPS.items():
        nightly = ci_configs.NIGHTLY_TOP_UPS[profile]
        assert all(stop <= nightly[name] for name, stop in stops.items()), profile


def test_fit_finds_the_least_stop_that_reaches_the_traces_wanted(monkeypatch):
    # one profile whose odd indices carry "a": 50 of them from BASE (100) on end at index 199
    monkeypatch.setattr(ci_configs, "NIGHTLY_TOP_UPS", {"p": {"a": 300}})
    carried = {"p": [frozenset({"a"}) if index % 2 else frozenset() for index in range(300)]}
    assert ci_configs.fit(carried, Counter(), 50) == {"p": {"a": 200}}
    assert ci_configs.fit(carried, Counter(), 49) == {"p": {"a": 198}}
    assert ci_configs.fit(carried, Counter({"a": 50}), 50) == {}  # the first traces suffice
