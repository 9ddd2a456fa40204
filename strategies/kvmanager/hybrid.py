"""The profiles of vLLM's hybrid coordinator, each a stream of its own (`streams.py`). Standard
library only.

"hybrid sizes" (`kvmanager/5[hybrid sizes]`): groups of different block sizes, hashed per
fewer tokens than a block.

A full-attention group of 2 to 8 tokens per block beside a sliding-window group of another
block size (or the same, hashed finer), the hash block a common divisor of both (often below
both), so the manager schedules in blocks of their least common multiple: hits are cut to it,
a window's run must end on it, a step caches only up to it, a dense sliding-window group keeps
only a window's worth before each scheduler block, and full attention registers the prompt's
last hash boundary inside a block as a partial entry (vLLM's `cache_partial_block`). The
requests are the corner generator's (`generator._Generator`), their prompts cut around the
scheduler block; the engine's settings vary as in the corner profiles (retention a multiple of
the scheduler block).

"chunked local" (`kvmanager/5[chunked local]`): full attention beside chunked-local attention,
whose tokens attend to their own chunk only: a hit's blocks before the last chunk are null, the
blocks of finished chunks are freed as a request moves on, an admission counts a chunk's worth
of blocks at most.

"mamba" (`kvmanager/5[mamba]`): full attention beside a Mamba group in mode "none" or "all",
prefix caching off: a request keeps the state of its last computed token alone, older ones
freed as it moves on. In 35% multi-token prediction's draft tokens (`mamba_speculative.py`):
speculative Mamba blocks, as many lookahead slots, spec-decode padding in half of those. In a
third (drawn after), the Mamba group's block the model's length, as vLLM's config makes it with
caching off (`mamba_block.py`, since 2026-12-08).

"eagle window" (`kvmanager/5[eagle window]`): EAGLE (`use_eagle`) beside a sliding window, of
one block size or of two as in "hybrid sizes": the hybrid coordinator looks each group one of
its blocks further and drops one, a window hit needs a block more, a step caches a block past
the scheduler grid, the sparse window keeps its runs a block later.

"mamba align" (`kvmanager/5[mamba align]`): full attention beside a Mamba group in mode
"align" with prefix caching, hashed per fewer tokens than a block in most (partial hits), one
prefill checkpoint block in 85% (`Trace.mamba_checkpoint`), speculative Mamba blocks in 70%
(`Trace.mamba_speculative`), lookahead hashes in a fifth (`Trace.hash_lookahead`, with MTP's
prefill lookahead in half of those), EAGLE's drop in a quarter of the rest
(`Trace.eagle`), judged in the reduced mode (`fuzz/kvmanager/align.py`).

"cross attention" (`kvmanager/5[cross attention]`): an encoder-decoder model's decoder, full
attention beside a cross-attention group, prefix caching off: each admission also takes the
encoder's blocks, held until the request is freed.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.generator import _Generator
from kvfuzz.strategies.kvmanager import (align_observed, mamba_async, mamba_block, mamba_eagle,
                                         mamba_shared_prefix, mamba_speculative)
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

# (full attention's block size, the sliding window's), the scheduler block at most 16 tokens
SIZES = ((2, 4), (4, 2), (4, 8), (8, 4), (2, 8), (8, 2), (4, 4), (8, 8), (2, 2), (4, 16))


def _ops(rng: random.Random, scheduler: int, max_model_len: int, num_ops: int) -> tuple:
    gen = _Generator(rng, scheduler, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    return tuple(gen.ops[:num_ops])


def _engine(rng: random.Random, size: int) -> dict:
    """The engine's settings, as the corner profiles vary them (`size`: the second group's
    block size)."""
    observed, in_flight = rng.random() < 0.4, rng.random() < 0.2
    return {"full_sequence_must_fit": rng.random() < 0.5,
            "max_in_flight_tokens": None if rng.random() < 0.7 else rng.randint(1, 2 * size),
            "watermark": 0.0 if rng.random() < 0.8 else rng.choice((0.1, 0.2)),
            "events": observed, "stats": observed,
            "lookahead": rng.randint(1, 3) if rng.random() < 0.2 else 0,
            "async_scheduling": in_flight}


def build(rng: random.Random, num_ops: int) -> Trace:
    full, swa = rng.choice(SIZES)
    common = math.gcd(full, swa)
    # a hash block below the block size in most traces (always where the sizes are equal)
    hashed = rng.choice([d for d in (1, 2, 4) if common % d == 0 and (d < common or
                                                                       full != swa)])
    return _windowed(rng, num_ops, full, swa, hashed, "hybrid sizes")


def _windowed(rng: random.Random, num_ops: int, full: int, swa: int, hashed: int, profile: str,
              more=lambda rng, settings: None) -> Trace:
    """Full attention in blocks of `full` beside a sliding window in blocks of `swa`, hashed
    per `hashed` tokens; `more(rng, settings)` sets a profile's own settings."""
    scheduler = math.lcm(full, swa)
    window = rng.randint(2, 3 * swa)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 48)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 8) * scheduler + rng.randint(0, 3)))
    retention = rng.choice((None, None, 0, rng.randint(1, 3) * scheduler))
    settings = _engine(rng, swa)
    more(rng, settings)
    if settings["async_scheduling"] and rng.random() < 0.5:
        settings["retained"] = rng.randint(1, swa)
    return Trace(blocks, full, window, max_model_len,
                 _ops(rng, scheduler, max_model_len, num_ops), retention, **settings,
                 window_block_size=swa if swa != full else 0,
                 hash_block_size=hashed if hashed != full else 0, note=f"profile {profile}")


def build_local(rng: random.Random, num_ops: int) -> Trace:
    """Full attention beside chunked-local attention (`ChunkedLocalAttentionSpec`) of one
    block size (vLLM asserts it), chunks of one to four blocks or of any length from 2 tokens,
    hashed per block or (in a quarter) per fewer tokens."""
    size = rng.choice((1, 2, 4, 4, 8))
    chunk = rng.choice((rng.randint(1, 4) * size, rng.randint(2, 4 * size)))
    hashed = rng.choice([d for d in (1, 2) if size % d == 0 and d < size] or [size]) \
        if rng.random() < 0.25 else size
    blocks = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    return Trace(blocks, size, 0, max_model_len, _ops(rng, size, max_model_len, num_ops),
                 rng.choice((None, 0)), **_engine(rng, size),
                 hash_block_size=hashed if hashed != size else 0, local_chunk=chunk,
                 note="profile chunked local")


def build_mamba(rng: random.Random, num_ops: int) -> Trace:
    """Full attention beside a Mamba group ("none" or "all") of one block size, prefix caching
    off (vLLM refuses both modes with it on)."""
    size = rng.choice((1, 2, 4, 4, 8))
    blocks = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    return Trace(blocks, size, 0, max_model_len, _ops(rng, size, max_model_len, num_ops),
                 None, **_engine(rng, size), caching=False,
                 mamba_mode=rng.choice(("none", "all")), note="profile mamba")


def build_mamba_profile(rng: random.Random, num_ops: int) -> Trace:
    """The "mamba" profile's trace: `build_mamba`'s (which the "full last" profile draws from
    too, unchanged), then multi-token prediction's speculative Mamba blocks, lookahead slots
    and padding in a share (`mamba_speculative.py`), then the Mamba group's block the model's
    length in another (`mamba_block.py`, since 2026-12-08), each drawn after all before it:
    the other traces keep theirs."""
    return mamba_block.drawn(rng, mamba_speculative.drawn(rng, build_mamba(rng, num_ops)))


def build_eagle(rng: random.Random, num_ops: int) -> Trace:
    """EAGLE beside a sliding window: half of one block size hashed per block (the plain
    configuration), half of the "hybrid sizes" choices; draft slots in most."""
    if rng.random() < 0.5:
        full = swa = hashed = rng.choice((1, 2, 4, 4, 8))
    else:
        full, swa = rng.choice(SIZES)
        hashed = rng.choice([d for d in (1, 2, 4) if math.gcd(full, swa) % d == 0])

    def eagle(rng, settings):
        settings["eagle"] = True
        settings["lookahead"] = rng.randint(1, 3) if rng.random() < 0.7 else 0
    return _windowed(rng, num_ops, full, swa, hashed, "eagle window", eagle)


def build_cross(rng: random.Random, num_ops: int) -> Trace:
    """Full attention beside cross-attention (`CrossAttentionSpec`) of one block size, caching
    off (vLLM's cross-attention manager refuses lookups): every request has 1 to 4 blocks'
    worth of encoder tokens (an encoder's fixed output, as Whisper's), or any count from 1."""
    size = rng.choice((1, 2, 4, 4, 8))
    encoder = rng.choice((rng.randint(1, 4) * size, rng.randint(1, 4 * size)))
    blocks = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    return Trace(blocks, size, 0, max_model_len, _ops(rng, size, max_model_len, num_ops),
                 None, **_engine(rng, size), caching=False, encoder_tokens=encoder,
                 note="profile cross attention")


def build_mamba_align(rng: random.Random, num_ops: int) -> Trace:
    """Full attention beside a Mamba group in mode "align" of one block size (2 to 8), prefix
    caching on, hashed per block or (three quarters) per fewer tokens: what turns vLLM's
    partial hits on; no events or stats (the reduced mode's; EAGLE, events and stats drawn
    after: the profile's own `build_mamba_align_profile`); a prefill checkpoint block
    in 85%, multi-token prediction's speculative blocks in 70%. (The profile's own traces:
    tokens in flight in half of the rest, `build_mamba_align_profile`.)"""
    size = rng.choice((2, 4, 4, 8))
    hashed = rng.choice([d for d in (1, 2, 4) if d < size]) if rng.random() < 0.75 else size
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 48)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    settings = _engine(rng, size) | {"events": False, "stats": False,
                                     "async_scheduling": False}
    ops = _ops(rng, size, max_model_len, num_ops)
    retention = rng.choice((None, 0))
    # a prefill checkpoint block in 85% (drawn last: the other draws are as before it), its
    # alignment a hash block or a token; 85% and 70% below so that seed 0's first 200 traces
    # of the mix hold a step whose checkpoint is a speculative block (index 91)
    checkpoint = rng.choice((hashed, 1)) if rng.random() < 0.85 else 0
    # multi-token prediction in 70%: 1 or 2 draft tokens' speculative Mamba blocks (the
    # lookahead slots as drawn above)
    speculative = rng.randint(1, 2) if rng.random() < 0.7 else 0
    return Trace(blocks, size, 0, max_model_len, ops, retention, **settings,
                 mamba_mode="align", hash_block_size=hashed if hashed != size else 0,
                 mamba_checkpoint=checkpoint, mamba_speculative=speculative,
                 note="profile mamba align")


def build_mamba_align_profile(rng: random.Random, num_ops: int) -> Trace:
    """The "mamba align" profile's trace: `build_mamba_align`'s (which the "full last" and
    "mamba connector" profiles draw from too, unchanged), then lookahead hashes (vLLM's default
    beside MTP's drafts: each hash unit's hash covers the 1 to 3 tokens after it) in a fifth,
    drawn after every other draw (the other traces are as before it), and with them in half
    MTP's prefill lookahead as vLLM's config sets it, of as many tokens (drawn last: the
    lookahead traces are otherwise as before it). (Not with a connector: vLLM keeps the legacy
    hashes with one.) Then tokens in flight in half of those without speculative blocks or
    lookahead, from draws after all these (`mamba_async.py`). Then EAGLE's drop in a quarter
    of those without lookahead hashes (`mamba_eagle.py`). Then KV events and stats in a share
    (`align_observed.py`). Then Mamba's shared-prefix checkpoint in half of the EAGLE traces
    where vLLM turns it on (`mamba_shared_prefix.py`). Then multi-module MTP's prefill
    lookahead in half of the EAGLE traces without it (`mamba_eagle.mtp`). Then hits reported
    in half of the traces observing events, drawn last (`align_observed.reported`)."""
    trace = build_mamba_align(rng, num_ops)
    if rng.random() < 0.2:
        ahead = rng.choice((1, 1, 2, 3))
        trace = replace(trace, hash_lookahead=ahead,
                        prefill_lookahead=ahead if rng.random() < 0.5 else 0)
    trace = mamba_eagle.drawn(rng, mamba_async.in_flight(rng, trace))
    trace = align_observed.observed(rng, trace)
    trace = mamba_shared_prefix.drawn(rng, trace)  # (then MTP's k >= 2: `mamba_eagle.mtp`)
    trace = mamba_eagle.mtp(rng, trace)  # (then hits reported: `align_observed.reported`)
    return align_observed.reported(rng, trace)  # (drawn last: the other traces keep theirs)


# The profiles these streams make (a trace's `note` is "profile NAME")
PROFILES = ("hybrid sizes", "chunked local", "mamba", "eagle window", "cross attention",
            "mamba align")
NAME = "kvmanager/5[hybrid sizes]"  # a stream of its own beside kvmanager/5
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
LOCAL = TraceGenerator("kvmanager/5[chunked local]", build_local, num_ops=200,
                       max_fuzz_ops=200)
MAMBA = TraceGenerator("kvmanager/5[mamba]", build_mamba_profile, num_ops=200, max_fuzz_ops=200)
EAGLE = TraceGenerator("kvmanager/5[eagle window]", build_eagle, num_ops=200,
                       max_fuzz_ops=200)
CROSS = TraceGenerator("kvmanager/5[cross attention]", build_cross, num_ops=200,
                       max_fuzz_ops=200)
MAMBA_ALIGN = TraceGenerator("kvmanager/5[mamba align]", build_mamba_align_profile,
                             num_ops=200, max_fuzz_ops=200)
