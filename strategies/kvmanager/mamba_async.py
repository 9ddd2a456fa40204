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

from kvfuzz.strategies.kvmanager.generator import VOCAB
from kvfuzz.strategies.kvmanager.trace import (Decode, Placeholder, Processed, Sample, Schedule,
                                               Settle)

SHARE = 0.5  # of the traces without speculative blocks or lookahead hashes
# of those made asynchronous, the share given speculative blocks and draft tokens in flight
# (`drafted`, drawn after every other draw: the other traces keep their ops). Off: at 0.5
# "mamba align" index 1390 diverges (a drafted step refused by vLLM where the reduced mode's
# exact count expects it allocated; docs/upstream-vllm.md, "Draft tokens in flight beside a
# Mamba align group"), indices 0-1389 agree
DRAFT_SHARE = 0.0


def in_flight(rng: random.Random, trace):
    """`trace` (a "mamba align" one), or in `SHARE` of those without speculative blocks or
    lookahead hashes the same under asynchronous scheduling, its ops `reshaped` (lookahead
    hashes come with MTP's drafts in vLLM's config; not judged in flight)."""
    if trace.mamba_speculative or trace.hash_lookahead or trace.prefill_lookahead or \
            rng.random() >= SHARE:
        return trace
    trace = replace(trace, async_scheduling=True, ops=reshaped(rng, trace.ops))
    return drafted(rng, trace) if rng.random() < DRAFT_SHARE else trace


def drafted(rng: random.Random, trace):
    """`trace` (asynchronous) with multi-token prediction's k = 1 or 2 speculative Mamba blocks
    (below the block size) and k lookahead slots an allocation (vLLM's `num_lookahead_tokens`):
    each slot of a token in flight (`placeholder`) carries k drafts; the output that comes after
    the next one (the `sample` after that placeholder: the output of the step before it, as
    vLLM's AsyncScheduler has it) appends the token and the 0 to k drafts accepted, then its
    `settle` rolls the rejected back. A request's other ops first resolve the drafts of its
    step in flight: a decode or a processed output rejects them all (a `settle` with k), as an
    output that accepted none. The trace keeps its number of ops (cut there)."""
    # k below the block size: a step of 1 + k >= block-size tokens can take a prefill checkpoint
    # past the request's tokens (in the drafts), where vLLM 0.33.0's partial-tail caching
    # asserts (`block_pool._get_partial_block_hash`; docs/upstream-vllm.md), not judged here
    k, ops, out, at = min(rng.randint(1, 2), trace.block_size - 1), trace.ops, [], 0
    if k < 1:
        return trace
    flying: dict[int, int] = {}  # rid -> the drafts of its step in flight, not yet resolved
    while at < len(ops):
        op = ops[at]
        at += 1
        rid = getattr(op, "rid", None)
        if isinstance(op, Placeholder) and at < len(ops) and isinstance(ops[at], Sample) and \
                ops[at].rid == rid:
            out += [replace(op, drafts=k), ops[at]]
            at += 1
            earlier = flying.pop(rid, 0)  # (the output's step: the one before this placeholder)
            if earlier:
                accepted = rng.randint(0, earlier)
                out += [Sample(rid, rng.randrange(VOCAB)) for _ in range(accepted)]
                out.append(Settle(rid, rejected=earlier - accepted))
                if at < len(ops) and isinstance(ops[at], Settle) and ops[at].rid == rid:
                    at += 1  # (the reshaped output's own settle: this one instead)
            flying[rid] = k
            continue
        if rid in flying and isinstance(op, (Decode, Processed)):
            out.append(Settle(rid, rejected=flying[rid]) if isinstance(op, Decode) else op)
            out.append(op if isinstance(op, Decode) else Settle(rid, rejected=flying[rid]))
            del flying[rid]
            continue
        if rid in flying and not isinstance(op, (Sample, Settle)):
            del flying[rid]  # (a preemption or a finish drops the step's drafts)
        out.append(op)
    return replace(trace, mamba_speculative=k, lookahead=k, ops=tuple(out[:len(ops)]))


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
