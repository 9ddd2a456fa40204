"""The "hisparse" profile (`kvmanager/5[hisparse]`, a stream of its own): vLLM's HiSparse groups
(`Trace.hisparse`): its source group on a host pool of its own, beside the indexer's full
attention, the resident pages and the hot region on the device pool. The source group
publishes a page's hash once its write-back is done, and keeps hits the device groups lost (an
eviction, a tight pool): an admission then retains only what the hit covers (vLLM's
`retains_longer_hit`, `KVCacheManager.allocate_slots`). Before this profile kvfuzz built none
(`kvfuzz mutate`'s line 497 of `kv_cache_manager.py`, `+` as `*`, not reached). The requests are
the hybrid profiles' (`hybrid._ops`): many over a few prompt families, so that hits and
evictions are common. Standard library only."""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import hybrid
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator


def build_hisparse(rng: random.Random, num_ops: int) -> Trace:
    """Blocks of 1 to 8 tokens; a device pool of 6 to 48 blocks (the indexer's, the resident
    pages' and the hot regions' together), a host pool of 3 to 40 (often the tighter one);
    the whole-request check and the watermark as the corner profiles draw them, an in-flight
    budget (the resident pages' admission window) in a quarter."""
    size = rng.choice((1, 2, 4, 4, 8))
    blocks = rng.choice((rng.randint(6, 16), rng.randint(16, 48)))
    host = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    retention = rng.choice((None, None, 0))
    fit = rng.random() < 0.5
    in_flight = rng.randint(size, 4 * size) if rng.random() < 0.25 else None
    watermark = 0.0 if rng.random() < 0.8 else rng.choice((0.1, 0.2))
    ops = hybrid._ops(rng, size, max_model_len, num_ops)
    return Trace(blocks, size, 0, max_model_len, ops, retention, fit, in_flight, watermark,
                 hisparse=host, note="profile hisparse")


def build_speculative(rng: random.Random, num_ops: int) -> Trace:
    """The profile's trace (`build_hisparse`, which "hisparse lag", "hisparse import" and
    "capped hisparse" build on and draw after), then, drawn last (a trace without it is the
    trace before the draw), speculative decoding in a quarter: the scheduler's lookahead slots
    for 1 to 3 draft tokens (`Trace.lookahead`), with EAGLE's drop in half of those
    (`Trace.eagle`: vLLM sets `use_eagle` for EAGLE and MTP drafters; every group takes the
    drop, none flagged apart): HiSparse's model is served with MTP (issue 24)."""
    trace = build_hisparse(rng, num_ops)
    if rng.random() >= 0.25:
        return trace
    return replace(trace, lookahead=rng.randint(1, 3), eagle=rng.random() < 0.5)


PROFILES = ("hisparse",)
GENERATOR = TraceGenerator("kvmanager/5[hisparse]", build_speculative, num_ops=200,
                           max_fuzz_ops=200)
