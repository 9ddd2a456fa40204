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
  (`settle`), but where that slot would reach `max_model_len` (no step there: the decode stays);
- before one in eight of a running request's allocations its last output is processed
  (`processed`): nothing of it in flight then.

The trace keeps its number of ops (the reshaped list is cut there). Standard library only."""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.generator import VOCAB
from kvfuzz.strategies.kvmanager.trace import (Arrive, Decode, Placeholder, Preempt,
                                               Processed, Sample, Schedule, Settle)

SHARE = 0.5  # of the traces without speculative blocks or lookahead hashes
# of those made asynchronous, the share given speculative blocks and draft tokens in flight
# (`drafted`, drawn after every other draw: the other traces keep their ops). On since
# 2026-12-06 (index 1390's divergence settled: a settle vLLM never makes, which `drafted` no
# longer shapes and the reduced mode resolves to nothing; docs/upstream-vllm.md, "Draft tokens
# in flight beside a Mamba align group")
DRAFT_SHARE = 0.5


def in_flight(rng: random.Random, trace):
    """`trace` (a "mamba align" one), or in `SHARE` of those without speculative blocks or
    lookahead hashes the same under asynchronous scheduling, its ops `reshaped` (lookahead
    hashes come with MTP's drafts in vLLM's config; not judged in flight)."""
    if trace.mamba_speculative or trace.hash_lookahead or trace.prefill_lookahead or \
            rng.random() >= SHARE:
        return trace
    trace = replace(trace, async_scheduling=True,
                    ops=reshaped(rng, trace.ops, trace.max_model_len))
    return preempted_on_refusal(drafted(rng, trace) if rng.random() < DRAFT_SHARE else trace)


READMITTED = 10**4  # the chunk of a request admitted again after its refusal: the whole prompt


def preempted_on_refusal(trace):
    """`trace` (asynchronous) with, before each output that a `placeholder` or a `processed` of
    its request opens (its `sample`s, its `settle`), what vLLM 0.33.0's running loop makes where
    that request's last allocation was refused (the pool's answer, which no draw here can
    foresee; since 2026-12-07): the request preempts itself (`Scheduler.schedule`: it is the
    lowest-priority running request) and its step in flight's output comes stale
    (`_preempt_request`: `num_stale_output_tokens`; `update_from_output` appends its tokens
    and caches nothing). So a `preempt` with `refused`, then the output's tokens as `sample`s
    with `stale`: where the allocation was made, these resolve to nothing and the output's own
    ops apply; where it was refused, those resolve to nothing (the request is waiting), and no
    settle follows a refused allocation (`align_async.settle_made`); after a placeholder's
    output, a `schedule` of the request: its admission again (vLLM's waiting queue holds the
    preempted request at its head) where it was preempted, nothing where it was not (its
    tokens all computed after that output, or its drafts past them). No draw: every other
    draw, and every synchronous trace, stays as it was. The trace keeps its number of ops
    (cut there)."""
    ops, out, admit = trace.ops, [], None
    for at, op in enumerate(ops):
        if admit is not None and not (isinstance(op, (Sample, Settle)) and op.rid == admit):
            out.append(Schedule(admit, READMITTED))
            admit = None
        if isinstance(op, Sample) and not op.stale and at and \
                isinstance(ops[at - 1], (Placeholder, Processed)) and ops[at - 1].rid == op.rid:
            end = at
            while end < len(ops) and isinstance(ops[end], Sample) and ops[end].rid == op.rid:
                end += 1
            out += [Preempt(op.rid, refused=True)] + [replace(sample, stale=True)
                                                      for sample in ops[at:end]]
            if isinstance(ops[at - 1], Placeholder) and not trace.mamba_speculative:
                admit = op.rid
        out.append(op)
    return replace(trace, ops=tuple(out[:len(ops)]))


def drafted(rng: random.Random, trace):
    """`trace` (asynchronous) with multi-token prediction's k = 1 or 2 speculative Mamba blocks
    (below the block size) and k lookahead slots an allocation (vLLM's `num_lookahead_tokens`),
    its requests' steps shaped as vLLM 0.33.0's AsyncScheduler makes them (what the guard
    records of MAMBA_ASYNC_MTP): a running request's step that samples is the slot of the token
    in flight and k drafts (`placeholder`: a decode becomes one too, as a step without drafts
    is one the scheduler makes only at max_model_len), and right after it comes the output of
    the step before it (the one in flight at its allocation): its sampled token and the 0 to d
    drafts of that step it accepted (`sample`s; d = 0 after a prefill chunk), then its `settle`
    rolling the d - accepted rejected back. A `processed` output is the step in flight's
    output the same way (its samples and settle after it), nothing in flight after. A
    preemption or a finish drops the step in flight. So every `settle` follows its output's
    samples, one an output, rejecting only the drafts of that output's step
    (`align_async.settle_made`). A `schedule` while a draft step flies resolves to nothing
    (the request's tokens all computed) and leaves that step in flight; a request whose next
    step would pass `max_model_len` ends at its step in flight's output (`processed`, its
    samples, no settle: vLLM schedules nothing after it), nothing more of it made. The settles
    `settle_made` still resolves to nothing come mostly after a refused allocation (the pool's,
    which the draw cannot foresee; vLLM preempts there). The trace keeps its number of ops
    (cut there)."""
    # k below the block size: a step of 1 + k >= block-size tokens can take a prefill checkpoint
    # past the request's tokens (in the drafts), where vLLM 0.33.0's partial-tail caching
    # asserts (`block_pool._get_partial_block_hash`; docs/upstream-vllm.md), not judged here
    k, ops, out, at = min(rng.randint(1, 2), trace.block_size - 1), trace.ops, [], 0
    if k < 1:
        return trace
    flying: dict[int, int] = {}  # rid -> the drafts of its step in flight, its output due
    admitted: set[int] = set()  # rids scheduled since their arrival or preemption (running)
    tokens: dict[int, int] = {}  # rid -> its prompt and the tokens sampled here since
    ended: set[int] = set()  # rids at the end of their length (below)

    def output(rid, token, settle=True):
        """The output of `rid`'s step in flight: its token, the drafts accepted, the settle."""
        drafts = flying.pop(rid)
        accepted = rng.randint(0, drafts)
        tokens[rid] = tokens.get(rid, 0) + 1 + accepted
        return [Sample(rid, token)] + [Sample(rid, rng.randrange(VOCAB))
                                       for _ in range(accepted)] + \
            [Settle(rid, rejected=drafts - accepted)][:int(settle)]

    while at < len(ops):
        op = ops[at]
        at += 1
        rid = getattr(op, "rid", None)
        if isinstance(op, (Placeholder, Decode)):
            token = op.token if isinstance(op, Decode) else rng.randrange(VOCAB)
            if isinstance(op, Placeholder) and at < len(ops) and \
                    isinstance(ops[at], Sample) and ops[at].rid == rid:
                token = ops[at].token
                at += 1
                if at < len(ops) and isinstance(ops[at], Settle) and ops[at].rid == rid:
                    at += 1  # (the reshaped output's own settle: this one instead)
            if rid in ended:  # (resolving to nothing there; no output after it)
                out.append(Placeholder(rid, drafts=k))
                continue
            if rid in admitted and tokens.get(rid, 0) + k + 2 >= trace.max_model_len:
                # its next step would pass max_model_len (the scheduler schedules none: the
                # placeholder resolves to nothing): vLLM ends the request at its step in
                # flight's output, so that output is processed with no step after it and no
                # settle (one with no step of its own would resolve to nothing, as vLLM makes
                # none: `align_async.settle_made`); no output of it after (its ops kept as
                # they resolve: the trace keeps its number of ops)
                ended.add(rid)
                if rid in flying:
                    out += [Processed(rid)] + output(rid, token, settle=False)
                continue
            out.append(Placeholder(rid, drafts=k))
            if rid not in admitted:
                continue  # (a request not running yet: the placeholder resolves to nothing)
            if rid in flying:  # (none: a request that sat out a step, its output processed)
                out += output(rid, token)
            flying[rid] = k
        elif isinstance(op, Processed):
            out.append(op)
            if rid in flying:
                out += output(rid, rng.randrange(VOCAB))
        elif isinstance(op, (Sample, Settle)):
            continue  # (only after a reshaped placeholder, taken there)
        else:
            if isinstance(op, Arrive):
                tokens[rid] = len(op.tokens)
                ended.discard(rid)
            if isinstance(op, Schedule):
                # a prefill chunk: no drafts (its output samples if final); but with a draft
                # step in flight the request's tokens are all computed (its drafts past them):
                # the schedule resolves to nothing and that step still flies (kept, so its
                # output's settle rejects its drafts, as vLLM's: `align_async.settle_made`)
                if not flying.get(rid) and rid not in ended:
                    flying[rid] = 0
                admitted.add(rid)
            elif rid is not None:
                flying.pop(rid, None)  # (a preemption or a finish drops the step's output)
                admitted.discard(rid)
            out.append(op)
    return replace(trace, mamba_speculative=k, lookahead=k, ops=tuple(out[:len(ops)]))


def reshaped(rng: random.Random, ops: tuple, max_model_len: int = 0) -> tuple:
    """The profile's ops as asynchronous scheduling makes them (see the module's docstring). A
    decode whose placeholder would reach `max_model_len` (the scheduler schedules no position
    there, so a settle after its sample would be one with no step of its own, which vLLM never
    makes: `align_async.settle_made`) stays a decode."""
    out: list = []
    tokens: dict[int, int] = {}  # rid -> its prompt and the tokens decoded since
    for op in ops:
        if isinstance(op, Arrive):
            tokens[op.rid] = len(op.tokens)
        if isinstance(op, (Schedule, Decode)) and rng.random() < 0.125:
            out.append(Processed(op.rid))
        if isinstance(op, Decode) and rng.random() < 0.5:
            settle = rng.random() < 0.5  # (drawn either way: the draws after stay as they were)
            if max_model_len and tokens.get(op.rid, 0) + 2 >= max_model_len:
                out.append(op)
            else:
                out += [Placeholder(op.rid), Sample(op.rid, op.token)] + \
                    [Settle(op.rid)][:int(settle)]
        else:
            out.append(op)
        if isinstance(op, Decode):
            tokens[op.rid] = tokens.get(op.rid, 0) + 1
    return tuple(out[:len(ops)])
