"""KV events and the prefix-cache stats beside a Mamba "align" group (since 2026-12-06): a share
of the "mamba align" profile's traces observe both (`Trace.events`, `Trace.stats`), judged by the
reduced mode's `fuzz/kvmanager/align_events.py`. Drawn after every other draw of the profile
(`hybrid.build_mamba_align_profile` calls `observed` last), so the other traces keep their
bytes, and the "mamba connector" and "full last" profiles, which take `build_mamba_align`'s
draws, theirs. No hits reported (`report`): the reduced mode does not judge the events of a
hit (`emit_cached_block_events`). Standard library only."""

from __future__ import annotations

import random
from dataclasses import replace

SHARE = 0.4  # of the profile's traces (as `hybrid._engine` observes its profiles' traces)


def observed(rng: random.Random, trace):
    """`trace`, or in `SHARE` of them the same observing its KV events and its stats."""
    return replace(trace, events=True, stats=True) if rng.random() < SHARE else trace
