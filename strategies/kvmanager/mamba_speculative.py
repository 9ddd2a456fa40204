"""Multi-token prediction beside a Mamba group in mode "none" or "all" (a share of the "mamba"
profile, `hybrid.build_mamba_profile`, and of the "mamba plain connector" profile,
`mamba_plain.build`; drawn after every other draw of the trace, so each profile's other traces
keep their bytes). Standard library only.

How vLLM serves a hybrid Mamba model (Qwen3-Next and the like) by default: MTP's draft tokens
and prefix caching off. The Mamba layers' spec then holds `num_speculative_blocks` equal to the
engine's `num_speculative_tokens` (`Trace.mamba_speculative`), the scheduler passes as many
lookahead slots on every allocation (`Trace.lookahead`), and pads an admission whose hit leaves
one token with as many placeholder drafts (`Schedule.pad`, `pad_spec_decode`). vLLM 0.33.0's
`MambaManager` outside mode "align" counts and takes `block_size * num_speculative_blocks`
tokens more than the others on every allocation (single_type_kv_cache_manager.py 1713-1730,
1800-1808): the full oracle's rule (`oracle/kvmanager/model.py`, `tokens_for`).
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Schedule, Trace

SHARE = 0.35  # of the "mamba" profile's traces
MAX_DRAFTS = 3  # draft tokens a step (vLLM's MTP configurations: 1 to 3 in common use)


def drawn(rng: random.Random, trace: Trace) -> Trace:
    """`trace` (caching off, a Mamba group in mode "none" or "all") with MTP's `k` draft tokens
    in `SHARE`: k speculative Mamba blocks, k lookahead slots, and in half of those every
    schedule and connector admission padded with k placeholder drafts; else unchanged."""
    if rng.random() >= SHARE:
        return trace
    k = rng.randint(1, MAX_DRAFTS)
    ops = trace.ops
    if rng.random() < 0.5:
        ops = tuple(replace(op, pad=k) if isinstance(op, (Schedule, Connect)) else op for op in ops)
    return replace(trace, mamba_speculative=k, lookahead=k, ops=ops)
