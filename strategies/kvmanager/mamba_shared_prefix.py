"""Mamba's shared-prefix checkpoint beside an "align" group (since 2026-12-06): a share of the
"mamba align" profile's EAGLE traces run with `enable_mamba_shared_prefix_checkpoint`
(`Trace.mamba_shared_prefix`), judged by the reduced mode (`fuzz/kvmanager/align_shared_prefix.py`).
Drawn after every other draw of the profile (`hybrid.build_mamba_align_profile`, after
`align_observed.observed`), and only for the traces where vLLM turns it on (the codec refuses
it elsewhere), so every other trace keeps its bytes, and the "full last" and "mamba connector"
profiles, which draw from `build_mamba_align`, theirs. With asynchronous scheduling too since
2026-12-06 (later): index 2294's crash of vLLM's `cache_full_blocks` assertion there came from a
`settle` vLLM's scheduler never makes (its step still counted in flight), now resolved to
nothing (`align_async.settle_made`; docs/upstream-vllm.md, "Mamba's shared-prefix checkpoint").
Standard library only."""

from __future__ import annotations

import random
from dataclasses import replace

SHARE = 0.5  # of the EAGLE traces where vLLM turns it on


def applies(trace) -> bool:
    """Whether vLLM 0.33.0 turns the setting on for `trace` (kv_cache_manager.py 188-193; the
    codec's condition), the profile's draw too (asynchronous scheduling or not)."""
    return (trace.mamba_mode == "align" and trace.caching and trace.eagle and
            trace.hash_size < trace.block_size and not trace.dcp and
            trace.prefill_lookahead <= 1)


def drawn(rng: random.Random, trace):
    """`trace` (a "mamba align" one), or in `SHARE` of those it `applies` to the same with the
    shared-prefix checkpoint on (one draw, only for those)."""
    if not applies(trace) or rng.random() >= SHARE:
        return trace
    return replace(trace, mamba_shared_prefix=True)
