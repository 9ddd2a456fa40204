"""EAGLE's last-block drop beside a Mamba "align" group (since 2026-12-06): a share of the
"mamba align" profile's traces without lookahead hashes (vLLM clears `use_eagle` with them)
run with `use_eagle`, every group taking the drop (none flagged apart), judged by the reduced
mode (`fuzz/kvmanager/align_eagle.py`). Drawn after every other draw of the profile
(`hybrid.build_mamba_align_profile`), so its other traces keep their bytes, and the "full last"
and "mamba connector" profiles, which draw from `build_mamba_align`, theirs; "mamba connector"
draws it after its own draws since 2026-12-07 (`mamba_connector.build`, the same `drawn`). No
multi-module MTP's prefill lookahead with it from that draw; multi-module MTP's (k >= 2, its
k - 1 tokens held back from caching) in a share of the EAGLE traces after every other draw
(`mtp`, since 2026-12-07; "mamba connector" too, its last draw, later that day). Standard
library only."""

from __future__ import annotations

import random
from dataclasses import replace

SHARE = 0.25  # of the traces without lookahead hashes
MTP_SHARE = 0.5  # of the EAGLE traces hashed per 2 tokens or more, no shared-prefix checkpoint


def drawn(rng: random.Random, trace):
    """`trace` (a "mamba align" one), or in `SHARE` of those without lookahead hashes the same
    with EAGLE's drop on (one draw, only for those)."""
    if trace.hash_lookahead or trace.prefill_lookahead or rng.random() >= SHARE:
        return trace
    return replace(trace, eagle=True)


def mtp(rng: random.Random, trace):
    """`trace`, or in `MTP_SHARE` of the EAGLE traces (no shared-prefix checkpoint, which vLLM
    turns off with re-prefillable tokens; no DCP) the same with multi-module MTP's prefill
    lookahead k of 2 to min(4, hash unit) (`fuzz/kvmanager/align_eagle.py`'s held-back tokens).
    Drawn after every other draw of the profile, only for those traces, so the rest keep their
    bytes. k at most the hash unit h, so h + P % h >= k: never the shapes where vLLM 0.33.0's
    scheduler stalls, nor those where its manager asserts (docs/upstream-vllm.md)."""
    if not trace.eagle or trace.mamba_shared_prefix or trace.prefill_lookahead or \
            trace.dcp or trace.hash_size < 2 or rng.random() >= MTP_SHARE:
        return trace
    return replace(trace, prefill_lookahead=rng.randint(2, min(4, trace.hash_size)))
