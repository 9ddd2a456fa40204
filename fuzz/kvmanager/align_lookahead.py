"""Lookahead hashes beside a Mamba "align" group (`Trace.hash_lookahead`, vLLM's
`num_hash_lookahead_tokens`: each hash unit's hash also covers the tokens after it), in the
reduced mode (`align.py`). What they change, read in vllm 0.33.0 and modelled where the mode
reads it:

- the request's hashes: a unit is hashed once that many tokens follow it (`lock_request.hashes`),
  so a hit, a cached block and every key the mode reads stop that much earlier;
- a chunk's prefill checkpoint: at `end - max(1, lookahead)` cut to the hash grid
  (`get_mamba_prefill_checkpoint_position`: `mamba_align.checkpoint_position`), so it may sit a
  block below its column; the release keys it there and offers no boundary state for it
  (`boundary._checkpoint_below`);
- no KV connector: vLLM keeps the legacy hashes with one (the codec refuses connector ops, and
  the mode makes no connector lookup).
Under retention 0 the replay-boundary rule (`align_retention.judged`) is not judged with them.
Multi-token prediction's prefill lookahead (`Trace.prefill_lookahead`, k tokens, vLLM's default
beside them) changes nothing here: the hybrid coordinator holds k - 1 tokens back from caching
only in groups that take EAGLE's drop (`get_num_cacheable_tokens`), which lookahead hashes clear.
"""

from __future__ import annotations

from kvfuzz.oracle.kvmanager import mamba_align

HIT = "lookahead hashes: a hit beside the Mamba group"
MOVED = "lookahead hashes: a Mamba checkpoint moved back"
EVENTS = (HIT, MOVED)


def events(trace, hit: int | None, computed: int, checkpoint: bool) -> tuple[str, ...]:
    """The events of an allocation made: a hit of `hit` tokens under lookahead hashes (None: no
    admission), and a checkpoint taken at a step to `computed` tokens that they moved back."""
    if not trace.hash_lookahead:
        return ()
    moved = checkpoint and mamba_align.checkpoint_position(
        computed, trace.hash_size, trace.hash_lookahead) != mamba_align.checkpoint_position(
        computed, trace.hash_size)
    return (HIT,) * bool(hit) + (MOVED,) * moved
