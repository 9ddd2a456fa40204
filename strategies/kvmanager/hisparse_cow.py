"""The "hisparse cow" profile (`kvmanager/5[hisparse cow]`, a share of the mix): HiSparse's four
groups (`Trace.hisparse`) beside a Mamba "align" group of the same block size, hashed per fewer
tokens than a block (`hash_block_size`), so that the coordinator turns fine-grained (partial) hits
on and a hit may end inside a block. A hit that ends inside a source block is a partial local hit in
the host pool: vLLM 0.33.0's `allocate_new_blocks` redirects the shared tail to a private host block
(`_apply_cow`), both ends holding a reference more until the worker reports the copy run
(`HiSparseCoordinator.take_host_block_copies`, `release_completed_host_copies`).

Such a hit needs, at the same length, a Mamba state (`MambaManager._cache_partial_tail_block`
keys one only at a step that ends exactly at its prompt's last hash boundary inside a block)
and a published source page holding it (the host publishes a page once its write-back is
durable, and keys the prompt's partial tail then). So the requests come in families: a
producer computes its prompt up to that boundary in one step, then the rest, then decodes past
the block (its page written back and published); consumers share the producer's prompt up to
the boundary and differ after it, each computing less than the rest of the block its hit ends
in, then finishing or preempted (`FILLED`: consumers that go on, not a profile: the released
class publishes their private page before its write-back). Families run interleaved, with
preemptions, finishes, device evictions and resets, and in half the traces the worker reports
late (`Trace.hisparse_lag`, the copies' releases with it). Standard library only."""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.trace import (Arrive, Decode, Evict, Finish, Preempt, Reset,
                                               Schedule, Trace)
from kvfuzz.strategies.sources import TraceGenerator


def _family(rng: random.Random, rids, base: int, size: int, hashed: int,
            short: bool) -> list[list]:
    """A producer's ops and its consumers' (each a list of ops, in order): the producer's
    prompt ends a hash block or more past its last hash boundary, which is inside a block.
    `short`: each consumer computes less than the rest of the block its hit ends in, then
    finishes or is preempted (its private page never filled)."""
    while True:  # (short: room in the block for a token computed and one not)
        boundary = rng.randint(1, 4 * size // hashed) * hashed
        if boundary % size and (not short or size - boundary % size >= 2):
            break
    length = boundary + rng.randint(1, hashed)  # prompt - 1 rounds down to `boundary`
    prompt = tuple(base + i for i in range(length))
    producer = next(rids)
    ops = [Arrive(producer, prompt), Schedule(producer, boundary),
           Schedule(producer, length - boundary)]
    ops += [Decode(producer, base + 500 + i) for i in range(rng.randint(size, 3 * size))]
    if rng.random() < 0.6:
        ops.append(Finish(producer))
    scripts = [ops]
    for k in range(rng.randint(1, 3)):
        rid = next(rids)
        if short:
            room = size - boundary % size - 1  # tokens it may compute in the hit's block
            chunk = rng.randint(1, room)
            # (its prompt's own last hash boundary past what it computes: no partial entry)
            tail = tuple(base + 700 + 50 * k + i for i in range(chunk + hashed + 1))
            scripts.append([Arrive(rid, prompt[:boundary] + tail), Schedule(rid, chunk),
                            rng.choice((Finish, Preempt))(rid)])
            continue
        tail = tuple(base + 700 + 50 * k + i for i in range(rng.randint(1, 2 * size)))
        # most share the whole boundary (a partial hit); some a hash block less
        cut = boundary if rng.random() < 0.8 else max(boundary - hashed, hashed)
        mine = [Arrive(rid, prompt[:cut] + tail), Schedule(rid, rng.randint(1, 3 * size))]
        mine += [Schedule(rid, rng.randint(1, 2 * size)) for _ in range(rng.randint(0, 2))]
        mine += [Decode(rid, base + 900 + 10 * k + i) for i in range(rng.randint(0, size))]
        if rng.random() < 0.2:
            mine += [Preempt(rid), Schedule(rid, rng.randint(1, 4 * size))]
        mine.append(Finish(rid))
        scripts.append(mine)
    return scripts


def _ops(rng: random.Random, size: int, hashed: int, blocks: int, num_ops: int,
         short: bool) -> tuple:
    rids = iter(range(1 << 20))
    pending: list[list] = []  # families in flight: each a list of scripts run in order
    ops, family = [], 0
    while len(ops) < num_ops:
        if len(pending) < rng.randint(1, 3):
            family += 1
            pending.append(_family(rng, rids, 1000 * family, size, hashed, short))
        scripts = rng.choice(pending)
        ops.append(scripts[0].pop(0))
        if not scripts[0]:
            scripts.pop(0)
        if not scripts:
            pending.remove(scripts)
        draw = rng.random()
        if draw < 0.03:
            ops.append(Evict(tuple(rng.sample(range(1, blocks), rng.randint(1, 3)))))
        elif draw < 0.04:
            ops.append(Reset())
    return tuple(ops[:num_ops])


def build_cow(rng: random.Random, num_ops: int, short: bool = True,
              ahead: bool = True) -> Trace:
    """Blocks of 4 or 8 (2 too where not `short`) hashed per 1, 2 or 4 tokens (fewer than a
    block); a device pool of 24 to 64 blocks (the Mamba group's states take them too), a host
    pool of 8 to 40; the whole-request check and the watermark as the "hisparse" profile draws
    them; the worker late in half (`hisparse_lag`: at most 1 to 4 ops, 1 or 2 ranks).
    `short`: every consumer stops short of the block its hit ends in (the profile), and half
    the traces give the Mamba group a prefill checkpoint block (`Trace.mamba_checkpoint`), half
    speculative blocks (`Trace.mamba_speculative`), and half of those the draft tokens'
    lookahead slots as many (`Trace.lookahead`: speculative decoding's k draft tokens give
    the Mamba group k speculative blocks and every allocation k lookahead slots, the
    scheduler's `num_lookahead_tokens`). `ahead` False: no lookahead draw (the "capped
    hisparse" profile draws after this: its traces stay as they were)."""
    size = rng.choice((4, 4, 8) if short else (2, 4, 4, 8))
    hashed = rng.choice([d for d in (1, 2, 4) if d < size])
    blocks = rng.randint(24, 64)
    host = rng.choice((rng.randint(8, 16), rng.randint(16, 40)))
    fit = rng.random() < 0.5
    watermark = 0.0 if rng.random() < 0.8 else 0.1
    lag = (rng.randint(1, 4), rng.choice((1, 2)), rng.randrange(2**31)) \
        if rng.random() < 0.5 else ()
    ops = _ops(rng, size, hashed, blocks, num_ops, short)
    # a Mamba prefill checkpoint block in half the profile's traces, its alignment a hash block
    # or a token (drawn after every other draw: a trace without one is as before it)
    checkpoint = rng.choice((hashed, 1)) if short and rng.random() < 0.5 else 0
    # multi-token prediction's speculative Mamba blocks (1 or 2) in half, drawn after that
    speculative = rng.randint(1, 2) if short and rng.random() < 0.5 else 0
    # and in half of those the draft tokens' lookahead slots (drawn last, as above)
    lookahead = speculative if ahead and speculative and rng.random() < 0.5 else 0
    return Trace(blocks, size, 0, 1024, ops, None, fit, None, watermark, hisparse=host,
                 lookahead=lookahead,
                 hisparse_lag=lag, mamba_mode="align", hash_block_size=hashed,
                 mamba_checkpoint=checkpoint, mamba_speculative=speculative,
                 note="profile hisparse cow" if short else "hisparse cow, pages filled")


def build_filled(rng: random.Random, num_ops: int) -> Trace:
    return build_cow(rng, num_ops, short=False)


PROFILES = ("hisparse cow",)
GENERATOR = TraceGenerator("kvmanager/5[hisparse cow]", build_cow, num_ops=200,
                           max_fuzz_ops=200)
# Consumers that go on past the block their hit ends in, filling their private page: not a
# profile (vLLM 0.33.0 publishes that page at the admission, before any write-back of it:
# "published early" on most traces; docs/upstream-vllm.md, "HiSparse's host copy-on-write"),
# kept for its tests and for a release that writes the page back first
FILLED = TraceGenerator("kvmanager/5[hisparse cow filled]", build_filled, num_ops=200,
                        max_fuzz_ops=200)
