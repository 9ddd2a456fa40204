"""CI's seeded `kvmanager` traces per configuration (`ci_configs.py`, issue 24): the pinned
counts of `test_every_profile.py`'s shards reach 2,000 traces for every configuration the
lock step names but the exempt ones, and the table pins exactly the shards that run. No vLLM
needed: the counts are read from ci_configs.json, which each shard checks against its run."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.configs import CONFIGS
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from tests.kvmanager import ci_configs


def test_every_configuration_runs_2000_ci_traces():
    pinned = ci_configs.load_pinned()
    assert ci_configs.short_of(pinned, CONFIGS) == {}
    assert set(ci_configs.EXEMPT) <= set(CONFIGS)  # an exemption names a configuration


def test_the_pinned_table_names_every_shard_that_runs_and_nothing_else():
    shards = ci_configs.base_shards(KVMANAGER.profiles()) + ci_configs.top_up_shards()
    assert set(ci_configs.load_pinned()) == {ci_configs.shard_key(*shard) for shard in shards}


def test_a_configuration_short_of_2000_is_named_with_its_sum():
    # the check can fail: one trace fewer of the least-covered configuration is reported
    pinned = {key: dict(counts) for key, counts in ci_configs.load_pinned().items()}
    total = {name: sum(counts.get(name, 0) for counts in pinned.values()) for name in CONFIGS}
    name = min((n for n in CONFIGS if n not in ci_configs.EXEMPT), key=total.get)
    key = next(key for key, counts in pinned.items() if counts.get(name))
    pinned[key][name] -= total[name] - ci_configs.WANTED + 1
    assert ci_configs.short_of(pinned, CONFIGS) == {name: ci_configs.WANTED - 1}


def test_the_top_ups_run_only_traces_of_their_configurations_before_their_stops():
    stream = KVMANAGER.alone("async").generator
    traces = [stream.generate(0, index) for index in range(1500, 1520)]
    carry = [trace.retained > 0 for trace in traces]
    assert any(carry) and not all(carry)
    rules = (("extra retained tokens", 1510),)
    ran = [ci_configs.runs(t, 1500 + i, rules) for i, t in enumerate(traces)]
    assert ran == carry[:10] + [False] * 10  # past its stop a configuration runs nothing
    assert all(ci_configs.runs(t, 1500 + i, ()) for i, t in enumerate(traces))


def test_each_top_up_shard_carries_the_stops_that_reach_into_it():
    for profile, first, stop, rules in ci_configs.top_up_shards():
        stops = ci_configs.TOP_UPS[profile]
        assert rules and all(stops[name] == end > first for name, end in rules)
        assert set(stops) - {name for name, _ in rules} == {
            name for name, end in stops.items() if end <= first}
        assert ci_configs.BASE <= first < stop <= max(stops.values())
