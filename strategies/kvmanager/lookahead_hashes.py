"""The "lookahead hashes" profile (`kvmanager/5[lookahead hashes]`, a stream of its own): the
engine's lookahead hashing (`num_hash_lookahead_tokens`, vLLM 0.33.0's default with EAGLE and
prefix caching): a block's hash also covers the 1 to 3 tokens after it (the drafter's KV at the
block's last position reads them), so a block is hashed, looked up and cached only once they
exist, and equal blocks followed by other tokens are different blocks. The scheduler then clears
`use_eagle` (no block dropped from a hit); draft tokens get slots (1 to 4 with one token of
lookahead, EAGLE's; as many as the lookahead with more, multi-token prediction's).

The corner generator's requests (`generator._Generator`): prompt families cut at, one before and
one after block boundaries, then their own tokens, so siblings often share a block and differ in
the token right after it. Full attention alone or (30%) beside a sliding window of the same
block size, hashed per block; KV events in half (their lookahead tokens compared), hits
reported in some, stats, tokens in flight in a fifth; half of the requests carry extra keys
(LoRA, salt, images: `extra_keys.with_keys`), which the lookahead tokens' keys join. In 70% the
scheduler pads an admission whose hit leaves one token with placeholder drafts (`Schedule.pad`,
vLLM's `pad_spec_decode`). Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import generator
from kvfuzz.strategies.kvmanager.extra_keys import with_keys
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "lookahead hashes"


def build(rng: random.Random, num_ops: int) -> Trace:
    block_size = rng.choice((1, 2, 4, 4, 8))
    window = 0 if rng.random() < 0.7 else rng.randint(2, 4 * block_size)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(4, 12) * block_size + rng.randint(0, 3)))
    ahead = rng.choice((1, 1, 2, 3))
    events = rng.random() < 0.5
    settings = {"events": events, "report": events and rng.random() < 0.3,
                "stats": rng.random() < 0.3, "async_scheduling": rng.random() < 0.2,
                "lookahead": rng.randint(1, 4) if ahead == 1 else ahead,
                "full_sequence_must_fit": rng.random() < 0.5,
                "retention": rng.choice((None, 0, 0))}
    gen = generator._Generator(rng, block_size, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    ops = with_keys(rng, gen.ops[:num_ops], block_size)
    # The scheduler's spec-decode padding (drawn last: the traces are otherwise as before it)
    if rng.random() < 0.7:
        ops = padded(rng, ops, settings["lookahead"], block_size, ahead)
    return Trace(blocks, block_size, window, max_model_len, ops, hash_lookahead=ahead,
                 **settings, note=f"profile {PROFILE}")


def padded(rng: random.Random, ops, pad: int, block_size: int, ahead: int) -> tuple:
    """`ops` with every schedule carrying the draft count `pad` (which pads an admission whose
    hit leaves one token: the lock step's rule, `Schedule.pad`); with one token of lookahead
    hashing, up to two prompts one token past a block's end sent again right after their first
    schedule (as many ops cut from the end): met again, such a prompt's hit can leave its last
    token alone. (With more lookahead the last block's hash waits for tokens that never come,
    as in vLLM: no hit leaves one token.)"""
    ops = [replace(op, pad=pad) if isinstance(op, Schedule) else op for op in ops]
    arrivals = [op for op in ops if isinstance(op, Arrive) and len(op.tokens) > block_size and
                len(op.tokens) % block_size == 1 % block_size] if ahead == 1 else []
    count = min(len(arrivals), rng.randint(1, 2), len(ops) // 8)
    rid = max((op.rid for op in ops if isinstance(op, Arrive)), default=0)
    length = len(ops)
    for offset, again in enumerate(rng.sample(arrivals, count), start=1):
        first = next((i for i, op in enumerate(ops) if isinstance(op, Schedule) and
                      op.rid == again.rid and i > ops.index(again)), None)
        if first is not None:
            ops[first + 1:first + 1] = [replace(again, rid=rid + offset, no_cache_read=False),
                                        Schedule(rid + offset, len(again.tokens), pad)]
    return tuple(ops[:length])


PROFILES = (PROFILE,)
# 130 ops a trace (the older profiles' 200 cost some 23 ms of CPU a trace on the released
# class, 1,000 of them in CI 23 s; at 130 about 15 ms)
GENERATOR = TraceGenerator("kvmanager/5[lookahead hashes]", build, num_ops=130, max_fuzz_ops=200)
