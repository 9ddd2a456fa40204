"""EAGLE's last-block drop beside a Mamba "align" group (since 2026-12-06): a share of the
"mamba align" profile's traces without lookahead hashes (vLLM clears `use_eagle` with them)
run with `use_eagle`, every group taking the drop (none flagged apart), judged by the reduced
mode (`fuzz/kvmanager/align_eagle.py`). Drawn after every other draw of the profile
(`hybrid.build_mamba_align_profile`), so its other traces keep their bytes, and the "full last"
and "mamba connector" profiles, which draw from `build_mamba_align`, theirs. No multi-module
MTP's prefill lookahead with it (its k - 1 tokens held back are not modelled there; the codec
refuses k >= 2). Standard library only."""

from __future__ import annotations

import random
from dataclasses import replace

SHARE = 0.25  # of the traces without lookahead hashes


def drawn(rng: random.Random, trace):
    """`trace` (a "mamba align" one), or in `SHARE` of those without lookahead hashes the same
    with EAGLE's drop on (one draw, only for those)."""
    if trace.hash_lookahead or trace.prefill_lookahead or rng.random() >= SHARE:
        return trace
    return replace(trace, eagle=True)
