"""Mamba's shared-prefix checkpoint beside an "align" group (since 2026-12-06): a share of the
"mamba align" profile's EAGLE traces run with `enable_mamba_shared_prefix_checkpoint`
(`Trace.mamba_shared_prefix`), judged by the reduced mode (`fuzz/kvmanager/align_shared_prefix.py`).
Drawn after every other draw of the profile (`hybrid.build_mamba_align_profile`, after
`align_observed.observed`), and only for the traces where vLLM turns it on (the codec refuses
it elsewhere), so every other trace keeps its bytes, and the "full last" and "mamba connector"
profiles, which draw from `build_mamba_align`, theirs. Not drawn with asynchronous scheduling:
there a `settle` of a prompt's last chunk after a partial hit at its EAGLE boundary trips
vLLM's `cache_full_blocks` assertion with the setting off too (docs/upstream-vllm.md, "Mamba's
shared-prefix checkpoint"), which the setting's junction entries make frequent. Standard
library only."""

from __future__ import annotations

import random
from dataclasses import replace

SHARE = 0.5  # of the EAGLE traces where vLLM turns it on, without asynchronous scheduling


def applies(trace) -> bool:
    """Whether vLLM 0.33.0 turns the setting on for `trace` (kv_cache_manager.py 188-193; the
    codec's condition) and the profile draws it (no asynchronous scheduling)."""
    return (trace.mamba_mode == "align" and trace.caching and trace.eagle and
            trace.hash_size < trace.block_size and not trace.dcp and
            trace.prefill_lookahead <= 1 and not trace.async_scheduling)


def drawn(rng: random.Random, trace):
    """`trace` (a "mamba align" one), or in `SHARE` of those it `applies` to the same with the
    shared-prefix checkpoint on (one draw, only for those)."""
    if not applies(trace) or rng.random() >= SHARE:
        return trace
    return replace(trace, mamba_shared_prefix=True)
