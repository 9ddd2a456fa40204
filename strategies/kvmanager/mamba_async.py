"""Asynchronous scheduling beside a Mamba "align" group (since 2026-12-06): half of the
"mamba align" profile's traces without speculative blocks or lookahead hashes
(`hybrid.build_mamba_align_profile`; drawn after every other draw, so the others keep their
ops byte for byte, and the "mamba
connector" and "full last" profiles, which take `build_mamba_align`'s draws, theirs) run under
vLLM's `AsyncScheduler`'s shapes: every allocation of a running request holds its previous one
in flight (the trace's asynchronous mode), judged by the reduced mode's `align_async.py`. The
ops stay the profile's, reshaped from draws of their own:

- half the decodes become the slot of the token in flight first (`placeholder`), its `sample`
  when the step's output comes, and in half of those the scheduler's `cache_blocks` after it
  (`settle`);
- before one in eight of a running request's allocations its last output is processed
  (`processed`): nothing of it in flight then.

The trace keeps its number of ops (the reshaped list is cut there). Standard library only."""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.trace import (Decode, Placeholder, Processed, Sample, Schedule,
                                               Settle)

SHARE = 0.5  # of the traces without speculative blocks (draft tokens in flight: not judged)


def in_flight(rng: random.Random, trace):
    """`trace` (a "mamba align" one), or in `SHARE` of those without speculative blocks or
    lookahead hashes the same under asynchronous scheduling, its ops `reshaped` (lookahead
    hashes come with MTP's drafts in vLLM's config; not judged in flight)."""
    if trace.mamba_speculative or trace.hash_lookahead or trace.prefill_lookahead or \
            rng.random() >= SHARE:
        return trace
    return replace(trace, async_scheduling=True, ops=reshaped(rng, trace.ops))


def reshaped(rng: random.Random, ops: tuple) -> tuple:
    """The profile's ops as asynchronous scheduling makes them (see the module's docstring)."""
    out: list = []
    for op in ops:
        if isinstance(op, (Schedule, Decode)) and rng.random() < 0.125:
            out.append(Processed(op.rid))
        if isinstance(op, Decode) and rng.random() < 0.5:
            out += [Placeholder(op.rid), Sample(op.rid, op.token)]
            if rng.random() < 0.5:
                out.append(Settle(op.rid))
        else:
            out.append(op)
    return tuple(out[:len(ops)])
