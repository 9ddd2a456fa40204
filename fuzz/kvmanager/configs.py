"""What the `kvmanager` judge counts of a trace as a whole: the manager's configurations it sets
(`CONFIGS`, each counted once per trace as `config: NAME`; CI's counts per configuration are
pinned on them: `tests/kvmanager/ci_configs.py`) and the edge classes the oracle marks as it
answers (`MARKS`)."""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager.embeds_marks import CONFIGS as EMBEDS_CONFIGS
from kvfuzz.fuzz.kvmanager.key_marks import CONFIGS as KEY_CONFIGS
from kvfuzz.strategies.kvmanager import trace as kvmanager

# The manager's configurations a trace may set, each counted once per trace.
CONFIGS = {"sliding window": lambda t: bool(t.window),
           "sliding window alone (unitary coordinator)": lambda t: t.lone,
           "two sliding windows (multi-pass hit search)": lambda t: bool(t.first_window),
           "full attention's group last": lambda t: t.full_last,
           "caching off": lambda t: not t.caching,
           "KV events": lambda t: t.events, "hits reported": lambda t: t.report,
           "stats": lambda t: t.stats, "lookahead tokens": lambda t: t.lookahead > 0,
           "EAGLE": lambda t: t.eagle, "asynchronous scheduling": lambda t: t.async_scheduling,
           "extra retained tokens": lambda t: t.retained > 0,
           "sparse retention": lambda t: t.retention is not None,
           "whole request must fit": lambda t: t.full_sequence_must_fit,
           "watermark": lambda t: t.watermark > 0,
           "groups of different block sizes": lambda t: len(set(t.sizes)) > 1,
           "hash block below the block size": lambda t: t.hash_size < min(t.sizes),
           "chunked local attention": lambda t: t.local_chunk > 0,
           "Mamba": lambda t: bool(t.mamba_mode),
           "Mamba align mode, prefix caching on (reduced checks)":
               lambda t: t.mamba_mode == "align",
           "cross attention": lambda t: t.encoder_tokens > 0,
           "KV connector": lambda t: any(isinstance(o, kvmanager.Connect) for o in t.ops),
           # (beside a Mamba group the records are compared with one precision: its layers
           # turn zeroing on, not mixed precision; "mamba plain connector")
           "blocks zeroed (mixed precision)": lambda t: t.zeroing and not t.mamba_mode,
           "decode context parallel": lambda t: t.dcp > 1,
           "lookahead hashing": lambda t: t.hash_lookahead > 0,
           "EAGLE groups flagged apart": lambda t: t.eagle and 0 < len(t.eagle_groups) <
           len(t.sizes),
           "multi-token prediction (prefill lookahead)": lambda t: t.prefill_lookahead > 1,
           "Mamba prefill checkpoint blocks": lambda t: t.mamba_checkpoint > 0,
           "speculative Mamba blocks": lambda t: t.mamba_speculative > 0,
           "HiSparse host source group (reduced checks)": lambda t: t.hisparse > 0,
           **KEY_CONFIGS, **EMBEDS_CONFIGS}
# Edge classes the oracle marks as it answers (`KVManagerModel.take_marks`): the hybrid
# coordinator's alignment to the scheduler block size and full attention's partial entries.
MARKS = ("hit cut to the scheduler block size",
         "window hit: a block off the scheduler grid passed",
         "dense window: blocks between hit points uncached", "partial entry registered",
         "chunked-local hit: blocks before the chunk null",
         "EAGLE: a window hit drops its last block",
         "EAGLE: a block past the scheduler grid cached",
         "two windows: the hit search takes another pass",
         "hit cut by the caller's cap")
