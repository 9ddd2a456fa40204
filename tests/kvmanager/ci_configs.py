"""What CI's seeded `kvmanager` traces cover, configuration by configuration (issue 24: every
configuration runs 2,000 seeded traces on the released vLLM to the last op; a nightly run does,
CI 500 of each: `tests/bars.py`).

A profile is a mix of configurations (`fuzz/kvmanager/configs.py`'s `CONFIGS`: a window with
extra retained tokens, EAGLE, Mamba "align", cross attention, ...), and most configurations sit
in several profiles. CI runs every profile's first `BASE` traces (`base_shards`: the edge classes
each profile exists for are asserted on them, `REACHES` in `test_every_profile.py`; each is
reached by index 23 at the latest), then, per profile, each configuration `TOP_UPS` names up to
its own stop: of the profile's indices `BASE` to the largest stop, a trace runs if it carries a
configuration whose stop lies past its index (`runs`); the rest are only generated (under a
millisecond each). Each mode (`tests/bars.py`: "ci", "nightly") has its own stops, to reach its
own `WANTED`; CI's are the nightly stops scaled down, each configuration by the least factor
that reaches CI's `WANTED` (`fit`, by counting generated traces: `python -m
tests.kvmanager.ci_configs --fit`).

`PINNED` (ci_configs.json) holds each shard's count of traces per configuration, the shards of
both modes; each shard of `test_every_profile.py` asserts the counts its run reported
(`config: NAME` features), and `test_ci_configs.py` that each mode's sums reach its `WANTED` for
every configuration not `EXEMPT`.
Regenerate after changing a generator: `python -m tests.kvmanager.ci_configs` (generation
only, of some 24,000 traces: about 20 min of one core here, 2026-12-07)."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

from tests.bars import MODE

BASE = 100  # every profile's first traces, all run
WANTED = {"ci": 500, "nightly": 2000}
# Configurations issue 24 does not name: the profiles carrying them run BASE traces (each one's
# first 500 or more ran clean here: docs/upstream-vllm.md, "Speed")
EXEMPT = {"HiSparse host source group (reduced checks)": "HiSparse, 100 of each of its profiles",
          "sliding window alone (unitary coordinator)": "the lone window, 100 traces",
          "two sliding windows (multi-pass hit search)": "the two windows, 100 traces",
          "full attention's group last": "the full last profile, 100 traces"}
# Nightly: profile: {configuration: stop}. Chosen (2026-12-06) by serving the configurations rarest
# first, each from the profile whose traces carrying it cost least to run (CPU a trace measured
# per profile in CI's shards at c063c08, weighted by its op count, plus generating the indices
# passed over), the next such profile where one runs out, up to index 3000; a trace a
# configuration already ran for counts toward all it carries. 22,069 traces where 29,256 ran
# before (100 to 3,920 a profile), about two thirds of their CPU. The sums are checked, not
# trusted (test_ci_configs.py).
NIGHTLY_TOP_UPS = {
    "observed": {"hits reported": 1180},
    "chunked local": {"chunked local attention": 1686},
    "cross attention": {"cross attention": 466},
    "mamba align": {"Mamba align mode, prefix caching on (reduced checks)": 2000,
                    "Mamba prefill checkpoint blocks": 2338, "speculative Mamba blocks": 2796},
    "deferred frees": {"blocks zeroed (mixed precision)": 1409},
    "dcp": {"decode context parallel": 2000},
    "lookahead hashes": {"hits reported": 3000},
    "eagle groups": {"EAGLE groups flagged apart": 2499},
    "mtp": {"multi-token prediction (prefill lookahead)": 1953, "hits reported": 3000},
    "prompt embeds": {"prompt embeddings": 2003, "hits reported": 3000},
    "two windows": {"groups of different block sizes": 1258},
    "async outputs": {"extra retained tokens": 2481},
    "async connector": {"blocks zeroed (mixed precision)": 3000},
    "async drafts": {"lookahead hashing": 442},
    "full last": {"cross attention": 3000},
}
CI_TOP_UPS = {  # `python -m tests.kvmanager.ci_configs --fit` (2026-12-07, to 500)
    "observed": {"hits reported": 312},
    "chunked local": {"chunked local attention": 449},
    "cross attention": {"cross attention": 167},
    "mamba align": {"Mamba align mode, prefix caching on (reduced checks)": 279,
                    "Mamba prefill checkpoint blocks": 409,
                    "speculative Mamba blocks": 464},
    "deferred frees": {"blocks zeroed (mixed precision)": 297},
    "dcp": {"decode context parallel": 501},
    "lookahead hashes": {"hits reported": 670},
    "eagle groups": {"EAGLE groups flagged apart": 635},
    "mtp": {"multi-token prediction (prefill lookahead)": 316, "hits reported": 670},
    "prompt embeds": {"prompt embeddings": 502, "hits reported": 670},
    "two windows": {"groups of different block sizes": 274},
    "async outputs": {"extra retained tokens": 886},
    "async connector": {"blocks zeroed (mixed precision)": 537},
    "async drafts": {"lookahead hashing": 143},
    "full last": {"cross attention": 624},
}
TOP_UPS = {"ci": CI_TOP_UPS, "nightly": NIGHTLY_TOP_UPS}
TOP_SHARD = 500  # indices a top-up shard generates
PINNED_FILE = Path(__file__).with_name("ci_configs.json")


def base_shards(profiles) -> list[tuple[str, int, int, tuple]]:
    """(profile, first index, stop, (configuration, its stop) pairs a trace needs one of to
    run: () for every trace)."""
    return [(profile, 0, BASE, ()) for profile in profiles]


def shards(profiles, mode: str = MODE) -> list[tuple[str, int, int, tuple]]:
    """Every shard a run of `mode` runs: each profile's first `BASE`, then the top-ups."""
    return base_shards(profiles) + top_up_shards(mode)


def top_up_shards(mode: str = MODE) -> list[tuple[str, int, int, tuple]]:
    shards = []
    for profile, stops in TOP_UPS[mode].items():
        for first in range(BASE, max(stops.values()), TOP_SHARD):
            rules = tuple(sorted((name, stop) for name, stop in stops.items() if stop > first))
            last = max(stop for _, stop in rules)
            shards.append((profile, first, min(first + TOP_SHARD, last), rules))
    return shards


def shard_key(profile: str, first: int, stop: int, rules: tuple, mode: str = MODE) -> str:
    """A shard's name (its test id, its entry in `PINNED`). A top-up's names its mode too: CI's
    and a nightly run's over the same indices may run other traces (other stops)."""
    return f"{profile} {first}-{stop}" + (" top-up" if rules else "") + (
        " ci" if rules and mode == "ci" else "")


def runs(trace, index: int, rules: tuple) -> bool:
    """Whether a shard with `rules` runs `trace`, the profile's `index`: every trace where there
    are none, else one carrying a configuration whose stop lies past the index."""
    from kvfuzz.fuzz.kvmanager.configs import CONFIGS

    return _runs(index, rules, lambda name: CONFIGS[name](trace))


def _runs(index: int, rules: tuple, carries) -> bool:
    return not rules or any(index < stop and carries(name) for name, stop in rules)


def short_of(pinned: dict[str, dict[str, int]], configs, wanted: int) -> dict[str, int]:
    """The configurations (of `configs`, less EXEMPT) whose pinned traces sum under `wanted`,
    with their sums."""
    total = Counter()
    for counts in pinned.values():
        total.update(counts)
    return {name: total[name] for name in configs if name not in EXEMPT and total[name] < wanted}


def pinned_for(pinned: dict[str, dict[str, int]], profiles, mode: str) -> dict[str, dict]:
    """The pinned counts of the shards a run of `mode` runs."""
    return {key: pinned[key]
            for key in (shard_key(*shard, mode) for shard in shards(profiles, mode))}


def load_pinned() -> dict[str, dict[str, int]]:
    return json.loads(PINNED_FILE.read_text())


def _carried(profile: str, stop: int) -> list[frozenset]:
    """The configurations each of the profile's traces 0 to `stop` - 1 carries (generated only)."""
    from kvfuzz.fuzz.kvmanager.configs import CONFIGS
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    stream, carried = KVMANAGER.alone(profile).generator, []
    for index in range(stop):
        trace = stream.generate(0, index)
        carried.append(frozenset(name for name, applies in CONFIGS.items() if applies(trace)))
    return carried


def _count(carried: list[frozenset], first: int, stop: int, rules: tuple) -> dict[str, int]:
    counts = Counter()
    for index in range(first, stop):
        if _runs(index, rules, carried[index].__contains__):
            counts.update(carried[index])
    return dict(sorted(counts.items()))


def _totals(carried: dict[str, list], base: Counter, top_ups: dict) -> Counter:
    total = Counter(base)
    for profile, stops in top_ups.items():
        rules = tuple(stops.items())
        total.update(_count(carried[profile], BASE, max(stops.values()), rules))
    return total


def fit(carried: dict[str, list], base: Counter, wanted: int) -> dict[str, dict[str, int]]:
    """`NIGHTLY_TOP_UPS` scaled down to reach `wanted`: each configuration's stops moved toward
    `BASE` by the least factor (to 1/1024) at which, with every other configuration at `BASE`,
    its sum still reaches `wanted`. Together they reach it too: a stop moved out only adds
    traces."""
    def scaled(factors: dict[str, float]) -> dict[str, dict[str, int]]:
        return {profile: {name: BASE + math.ceil((stop - BASE) * factors.get(name, 0.0))
                          for name, stop in stops.items()}
                for profile, stops in NIGHTLY_TOP_UPS.items()}

    factors = {}
    for name in sorted({name for stops in NIGHTLY_TOP_UPS.values() for name in stops}):
        low, high = 0.0, 1.0
        if _totals(carried, base, scaled({}))[name] >= wanted:
            high = 0.0
        for _ in range(10 if high else 0):
            middle = (low + high) / 2
            if _totals(carried, base, scaled({name: middle}))[name] >= wanted:
                high = middle
            else:
                low = middle
        factors[name] = high
    return {profile: {name: stop for name, stop in stops.items() if stop > BASE}
            for profile, stops in scaled(factors).items() if max(stops.values()) > BASE}


def main(arguments: list[str]) -> None:
    if arguments not in ([], ["--fit"]):
        print("usage: python -m tests.kvmanager.ci_configs [--fit]: rewrites ci_configs.json "
              "(--fit: prints CI's stops for CI_TOP_UPS instead)", file=sys.stderr)
        sys.exit(2)
    from kvfuzz.fuzz.kvmanager.configs import CONFIGS
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    profiles = KVMANAGER.profiles()
    every = {shard_key(*shard, mode): shard for mode in TOP_UPS
             for shard in shards(profiles, mode)}
    ends = Counter()
    for profile, _, stop, _ in every.values():
        ends[profile] = max(ends[profile], stop)
    carried = {profile: _carried(profile, stop) for profile, stop in ends.items()}
    if arguments == ["--fit"]:  # CI's stops, to paste into CI_TOP_UPS
        base = Counter()
        for profile in profiles:
            base.update(_count(carried[profile], 0, BASE, ()))
        print(json.dumps(fit(carried, base, WANTED["ci"]), indent=4))
        return
    pinned = {key: _count(carried[shard[0]], *shard[1:]) for key, shard in every.items()}
    lines = (f"{json.dumps(key)}: {json.dumps(pinned[key], sort_keys=True)}"
             for key in sorted(pinned))
    PINNED_FILE.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # a shard a line
    for mode, wanted in WANTED.items():
        print(f"wrote {PINNED_FILE} ({len(pinned)} shards); {mode}, under {wanted}:",
              short_of(pinned_for(pinned, profiles, mode), CONFIGS, wanted) or "none")


if __name__ == "__main__":
    main(sys.argv[1:])
