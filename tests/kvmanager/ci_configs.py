"""What CI's seeded `kvmanager` traces cover, configuration by configuration (issue 24: every
configuration runs 2,000 seeded traces on the released vLLM to the last op in CI).

A profile is a mix of configurations (`fuzz/kvmanager/configs.py`'s `CONFIGS`: a window with
extra retained tokens, EAGLE, Mamba "align", cross attention, ...), and most configurations sit
in several profiles. CI runs each profile's first `PER_PROFILE` traces (`BASE`), then, for the
configurations those leave under 2,000, further indices of the profile that carries them most
(`TOP_UPS`): of indices `PER_PROFILE` to `stop - 1`, each trace carrying one of the named
configurations runs; the rest are only generated (well under a millisecond each). Counting by
configuration costs about 5,100 more traces where 2,000 of every profile cost 11,500
(`docs/upstream-vllm.md`, "Speed").

`PINNED` (ci_configs.json) holds each shard's count of traces per configuration; each shard of
`test_every_profile.py` asserts the counts its run reported (`config: NAME` features), and
`test_ci_configs.py` that their sums reach `WANTED` for every configuration not `EXEMPT`.
Regenerate after changing a generator: `python -m tests.kvmanager.ci_configs` (generation
only, about 30 s)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

PER_PROFILE, SHARD = 1500, 250
WANTED = 2000
# The HiSparse profiles, the lone window and the two windows, added after issue 24's list (issue
# 25's reach work) once CI was near its 30 minutes: 100 traces each, one shard (each one's first
# 500 or more ran clean here)
FEWER = {"hisparse": 100, "hisparse import": 100, "lone window": 100, "two windows": 100,
         # vLLM's asynchronous scheduler's own ops (issue 24, 2026-12-05): its first 2,000 ran
         # clean here
         "async outputs": 100,
         # a KV connector under it, alone only (2026-12-05): its first 2,000 ran clean here
         "async connector": 100,
         "hisparse lag": 100,
         # vLLM's asynchronous scheduler with draft tokens, alone only (issue 24, 2026-12-05):
         # its first 2,000 ran clean here
         "async drafts": 100,
         # full attention's group ordered last, alone only (2026-12-06): its first 600 ran
         # clean here
         "full last": 100,
         # resumable (streaming-input) requests, alone only (issue 24, 2026-12-06): its first
         # 2,000 ran clean here
         "streaming": 100}
# Profiles that carry no configuration the others do not bring to 2,000, or whose own ones the
# others (and the top-ups below) bring there, to free CI time (every configuration's sum is
# still checked): 1,000 each on 2026-12-05 (CI ran 1,500 of each before), 500 on 2026-12-06
# (their indices 500 to 999 ran clean in CI at stops 54 and 55); the EAGLE window, lookahead
# hashes and extra keys, 500 of their 1,500 (each config they carry sums 2,000 or more without
# the rest: "EAGLE" 3,760, "lookahead hashing" 2,101, LoRA 7,000 and more), chunked local 1,250
# (2,187 with the connector profiles' chunked-local traces). Indices past these ran clean in CI
# at every stop up to 55.
FEWER.update({"corners": 500, "scheduler": 500, "no caching": 500, "spec decode": 500,
              "eagle window": 500, "lookahead hashes": 500, "extra keys": 500,
              "chunked local": 1250})
# Configurations issue 24 does not name, run in FEWER's 100 traces (each first 2,000 ran clean
# here: docs/upstream-vllm.md, "Speed")
EXEMPT = {"HiSparse host source group (reduced checks)": "HiSparse, 100 of each of its profiles",
          "sliding window alone (unitary coordinator)": "the lone window, 100 traces",
          "two sliding windows (multi-pass hit search)": "the two windows, 100 traces",
          "full attention's group last": "the full last profile, 100 traces"}
# profile: (stop, configurations): its indices PER_PROFILE to stop - 1 that carry one of them.
# Chosen as the profile carrying each configuration most often (2026-12-05); the sums are
# checked, not trusted (test_ci_configs.py).
TOP_UPS = {
    "async": (3920, ("extra retained tokens",)),
    "mamba align": (2796, ("speculative Mamba blocks",)),
    "eagle groups": (2323, ("EAGLE groups flagged apart",)),
    "deferred frees": (2382, ("blocks zeroed (mixed precision)",)),
    "prompt embeds": (2003, ("prompt embeddings",)),
    "observed": (2510, ("hits reported",)),  # (1,782 before 2026-12-06)
    "cross attention": (2000, ("cross attention",)),
    "dcp": (2000, ("decode context parallel",)),
    "mtp": (2000, ("multi-token prediction (prefill lookahead)",)),
}
TOP_SHARD = 500  # indices a top-up shard generates
PINNED_FILE = Path(__file__).with_name("ci_configs.json")


def base_shards(profiles) -> list[tuple[str, int, int, tuple]]:
    """(profile, first index, stop, configurations a trace needs to run: () for every trace)."""
    return [(profile, first, min(first + SHARD, FEWER.get(profile, PER_PROFILE)), ())
            for profile in profiles
            for first in range(0, FEWER.get(profile, PER_PROFILE), SHARD)]


def top_up_shards() -> list[tuple[str, int, int, tuple]]:
    return [(profile, first, min(first + TOP_SHARD, stop), configs)
            for profile, (stop, configs) in TOP_UPS.items()
            for first in range(PER_PROFILE, stop, TOP_SHARD)]


def shard_key(profile: str, first: int, stop: int, configs: tuple) -> str:
    return f"{profile} {first}-{stop}" + (" top-up" if configs else "")


def runs(trace, configs: tuple) -> bool:
    """Whether a shard needing `configs` runs `trace` (every trace where it needs none)."""
    from kvfuzz.fuzz.kvmanager.configs import CONFIGS

    return not configs or any(CONFIGS[name](trace) for name in configs)


def short_of(pinned: dict[str, dict[str, int]], configs) -> dict[str, int]:
    """The configurations (of `configs`, less EXEMPT) whose pinned traces sum under WANTED, with
    their sums."""
    total = Counter()
    for counts in pinned.values():
        total.update(counts)
    return {name: total[name] for name in configs if name not in EXEMPT and total[name] < WANTED}


def load_pinned() -> dict[str, dict[str, int]]:
    return json.loads(PINNED_FILE.read_text())


def _count(profile: str, first: int, stop: int, configs: tuple) -> dict[str, int]:
    from kvfuzz.fuzz.kvmanager.configs import CONFIGS
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    stream, counts = KVMANAGER.alone(profile).generator, Counter()
    for index in range(first, stop):
        trace = stream.generate(0, index)
        if runs(trace, configs):
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
