"""KV events and the prefix-cache stats beside a Mamba "align" group (since 2026-12-06): a share
of the "mamba align" profile's traces observe both (`Trace.events`, `Trace.stats`), judged by the
reduced mode's `fuzz/kvmanager/align_events.py`. Drawn after every other draw of the profile
(`hybrid.build_mamba_align_profile` calls `observed` last), so the other traces keep their
bytes, and the "mamba connector" and "full last" profiles, which take `build_mamba_align`'s
draws, theirs. Since 2026-12-07: hits reported (`report`, the events of
`emit_cached_block_events`: `fuzz/kvmanager/align_reported.py`) in half of the observing
traces (`reported`, the profile's last draw), and the "mamba connector" profile's traces
observing both in a share (`connector_observed`), and since the same day, later, half of those
reporting their hits beside the connector's ops (`connector_reported`: a draw only for the
observing ones, the profile's last). Standard library only."""

from __future__ import annotations

import random
from dataclasses import replace

SHARE = 0.4  # of the profile's traces (as `hybrid._engine` observes its profiles' traces)


def observed(rng: random.Random, trace):
    """`trace`, or in `SHARE` of them the same observing its KV events and its stats."""
    return replace(trace, events=True, stats=True) if rng.random() < SHARE else trace


REPORTED_SHARE = 0.5  # of the "mamba align" traces that observe their events


def reported(rng: random.Random, trace):
    """`trace`, or in `REPORTED_SHARE` of those observing their events the same with its hits
    reported (a draw only for those: the profile's last, the others keep their bytes)."""
    if not trace.events:
        return trace
    return replace(trace, report=True) if rng.random() < REPORTED_SHARE else trace


CONNECTOR_REPORTED_SHARE = 0.5  # of the "mamba connector" traces that observe their events


def connector_observed(rng: random.Random, trace):
    """A "mamba connector" trace, or in `SHARE` of them the same observing its KV events and
    stats."""
    return observed(rng, trace)


def connector_reported(rng: random.Random, trace):
    """Of the "mamba connector" traces observing their events, in `CONNECTOR_REPORTED_SHARE`
    the same with its hits reported (a draw for those only, the profile's last: after
    multi-module MTP's, so every other trace keeps its bytes)."""
    if not trace.events:
        return trace
    return replace(trace, report=True) if rng.random() < CONNECTOR_REPORTED_SHARE else trace
