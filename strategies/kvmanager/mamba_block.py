"""A Mamba group's own block size in mode "none" (or "all"): a share of the "mamba" profile
(`hybrid.build_mamba_profile`), drawn after every other draw of the trace, so the profile's
other traces keep their bytes. Standard library only.

How vLLM 0.33.0 builds a hybrid Mamba model's groups with prefix caching off (the default):
`MambaModelConfig.verify_and_update_config` (model_executor/models/config.py) sets
`mamba_cache_mode` to "none" and, unless the user gave one, `mamba_block_size` to the model's
length, so the Mamba group's block holds a whole request's state slot while full attention
keeps its own block size; the engine's scheduler block is then the least common multiple of
the groups' sizes (`resolve_kv_cache_block_sizes`). The trace gives the Mamba group that size
in `Trace.window_block_size` (the second group's block size; a window's elsewhere).
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.limits import MAX_LEN
from kvfuzz.strategies.kvmanager.trace import Trace

SHARE = 1 / 3  # of the "mamba" profile's traces


def drawn(rng: random.Random, trace: Trace) -> Trace:
    """`trace` (caching off, a Mamba group in mode "none" or "all") with the Mamba group's
    block the model's length in `SHARE` (where that differs from full attention's and fits
    the codec's bound); else unchanged."""
    if rng.random() >= SHARE:
        return trace
    size = trace.max_model_len
    if size == trace.block_size or size > MAX_LEN:
        return trace
    return replace(trace, window_block_size=size)
