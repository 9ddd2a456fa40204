"""What CI's seeded `kvmanager` traces cover, configuration by configuration (issue 24: every
configuration runs 2,000 seeded traces on the released vLLM to the last op in CI).

A profile is a mix of configurations (`fuzz/kvmanager/configs.py`'s `CONFIGS`: a window with
extra retained tokens, EAGLE, Mamba "align", cross attention, ...), and most configurations sit
in several profiles. CI runs every profile's first `BASE` traces (`base_shards`: the edge classes
each profile exists for are asserted on them, `REACHES` in `test_every_profile.py`; each is
reached by index 23 at the latest), then, per profile, each configuration `TOP_UPS` names up to
its own stop: of the profile's indices `BASE` to the largest stop, a trace runs if it carries a
configuration whose stop lies past its index (`runs`); the rest are only generated (under a
millisecond each).

`PINNED` (ci_configs.json) holds each shard's count of traces per configuration; each shard of
`test_every_profile.py` asserts the counts its run reported (`config: NAME` features), and
`test_ci_configs.py` that their sums reach `WANTED` for every configuration not `EXEMPT`.
Regenerate after changing a generator: `python -m tests.kvmanager.ci_configs` (generation
only, about a minute)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

BASE = 100  # every profile's first traces, all run
WANTED = 2000
# Configurations issue 24 does not name: the profiles carrying them run BASE traces (each one's
# first 500 or more ran clean here: docs/upstream-vllm.md, "Speed")
EXEMPT = {"HiSparse host source group (reduced checks)": "HiSparse, 100 of each of its profiles",
          "sliding window alone (unitary coordinator)": "the lone window, 100 traces",
          "two sliding windows (multi-pass hit search)": "the two windows, 100 traces",
          "full attention's group last": "the full last profile, 100 traces"}
# profile: {configuration: stop}. Chosen (2026-12-06) by serving the configurations rarest
# first, each from the profile whose traces carrying it cost least to run (CPU a trace measured
# per profile in CI's shards at c063c08, weighted by its op count, plus generating the indices
# passed over), the next such profile where one runs out, up to index 3000; a trace a
# configuration already ran for counts toward all it carries. 22,069 traces where 29,256 ran
# before (100 to 3,920 a profile), about two thirds of their CPU. The sums are checked, not
# trusted (test_ci_configs.py).
TOP_UPS = {
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
TOP_SHARD = 500  # indices a top-up shard generates
PINNED_FILE = Path(__file__).with_name("ci_configs.json")


def base_shards(profiles) -> list[tuple[str, int, int, tuple]]:
    """(profile, first index, stop, (configuration, its stop) pairs a trace needs one of to
    run: () for every trace)."""
    return [(profile, 0, BASE, ()) for profile in profiles]


def top_up_shards() -> list[tuple[str, int, int, tuple]]:
    shards = []
    for profile, stops in TOP_UPS.items():
        for first in range(BASE, max(stops.values()), TOP_SHARD):
            rules = tuple(sorted((name, stop) for name, stop in stops.items() if stop > first))
            last = max(stop for _, stop in rules)
            shards.append((profile, first, min(first + TOP_SHARD, last), rules))
    return shards


def shard_key(profile: str, first: int, stop: int, rules: tuple) -> str:
    return f"{profile} {first}-{stop}" + (" top-up" if rules else "")


def runs(trace, index: int, rules: tuple) -> bool:
    """Whether a shard with `rules` runs `trace`, the profile's `index`: every trace where there
    are none, else one carrying a configuration whose stop lies past the index."""
    from kvfuzz.fuzz.kvmanager.configs import CONFIGS

    return not rules or any(index < stop and CONFIGS[name](trace) for name, stop in rules)


def short_of(pinned: dict[str, dict[str, int]], configs) -> dict[str, int]:
    """The configurations (of `configs`, less EXEMPT) whose pinned traces sum under WANTED, with
    their sums."""
    total = Counter()
    for counts in pinned.values():
        total.update(counts)
    return {name: total[name] for name in configs if name not in EXEMPT and total[name] < WANTED}


def load_pinned() -> dict[str, dict[str, int]]:
    return json.loads(PINNED_FILE.read_text())


def _count(profile: str, first: int, stop: int, rules: tuple) -> dict[str, int]:
    from kvfuzz.fuzz.kvmanager.configs import CONFIGS
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    stream, counts = KVMANAGER.alone(profile).generator, Counter()
    for index in range(first, stop):
        trace = stream.generate(0, index)
        if runs(trace, index, rules):
            counts.update(name for name, applies in CONFIGS.items() if applies(trace))
    return dict(sorted(counts.items()))


def main() -> None:
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    shards = base_shards(KVMANAGER.profiles()) + top_up_shards()
    pinned = {shard_key(*shard): _count(*shard) for shard in shards}
    lines = (f"{json.dumps(key)}: {json.dumps(pinned[key], sort_keys=True)}"
             for key in sorted(pinned))
    PINNED_FILE.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # a shard a line
    from kvfuzz.fuzz.kvmanager.configs import CONFIGS

    print(f"wrote {PINNED_FILE} ({len(pinned)} shards); under {WANTED}:",
          short_of(pinned, CONFIGS) or "none")


if __name__ == "__main__":
    main()
