"""The "mamba plain connector" profile (`kvmanager/5[mamba plain connector]`, a stream of its
own, made alone only: `streams.ALONE_ONLY`): a KV connector's external tokens beside a Mamba
group in mode "none" or "all", prefix caching off (vLLM refuses both modes with it on), as a
P/D-disaggregated or offloading deployment of a hybrid Mamba model runs without prefix caching.
Standard library only.

The "mamba" profile's layout (full attention beside a Mamba group of one block size, 1 to 8
tokens) and the "connector" profile's requests (`connector._Connected`: most admitted with
external tokens, half of them loaded asynchronously, some with blocks reserved, loads done or
failed, a one-token prompt loaded whole and looked up again). What vLLM 0.33.0 does there
(docs/upstream-vllm.md, 'A KV connector beside a Mamba group in mode "none" or "all"'):

- the scheduler asks the connector whatever the caching (`Scheduler.schedule`, the waiting
  branch): the local hit is 0 tokens, every computed token an external one;
- `MambaManager.get_num_skipped_tokens` is c - 1 in every mode, so the Mamba group's table
  after an admission with c external tokens is (c - 1) // b null blocks and one block of its
  own, the last external token's state (`add_local_computed_blocks` pads the nulls,
  `allocate_external_computed_blocks` takes the one block); full attention's is
  cdiv(c, b) blocks of its own;
- every asynchronous load is done or failed whole (`Loaded.valid` -1 or 0): with two groups
  the scheduler refuses block-level failures (`_handle_invalid_blocks`), a failed load comes
  as `failed_recving` and frees the request;
- Mamba layers turn `needs_kv_cache_zeroing` on (`KVCacheConfig.needs_kv_cache_zeroing`): the
  trace's `zeroing` set, full attention's new and external blocks recorded (the Mamba group's
  never: `MambaSpec` is no `AttentionSpec`), a quarter of the loads writing some groups only
  (`Connect.written`);
- every finish is preceded by the scheduler's `remove_skipped_blocks` of the request
  (`_connector_finished`, before `request_finished` reads the table:
  `mamba_connector._finished`);
- in three traces in ten vLLM's asynchronous scheduler (`_build_async`: the "async connector"
  profile's steps, its aborts deferred past a step in flight);
- since 2026-12-08, multi-token prediction in 35%, drawn last (`mamba_speculative.py`, as
  the "mamba" profile has it): k speculative Mamba blocks, k draft slots, in half of those
  every schedule and connector admission padded with k placeholder drafts; the Mamba group's
  table after an asynchronous load then holds its k speculative blocks past the last state's.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import (async_connector, connector, mamba_connector,
                                         mamba_speculative)
from kvfuzz.strategies.kvmanager.connector_ops import Loaded
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "mamba plain connector"
ASYNC_SHARE = 0.3  # traces under vLLM's asynchronous scheduler (`_build_async`)


def build(rng: random.Random, num_ops: int) -> Trace:
    """The profile's trace, then multi-token prediction in a share, drawn last (the other
    traces keep their bytes: `mamba_speculative.py`)."""
    trace = _build_async(rng, num_ops) if rng.random() < ASYNC_SHARE else _build(rng, num_ops)
    return mamba_speculative.drawn(rng, trace)


def _build(rng: random.Random, num_ops: int) -> Trace:
    size = rng.choice((1, 2, 4, 4, 8))
    blocks = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    mode = rng.choice(("none", "all"))
    observed = rng.random() < 0.3
    gen = connector._Connected(rng, size, max_model_len)
    gen.reconnects = True  # (a one-token prompt loaded whole: the connector asked again)
    while len(gen.ops) < num_ops:
        gen.step()
    # a failed load is the request's whole (two groups); a quarter of the loads write some
    # groups only; a `remove_skipped` before each finish
    ops = mamba_connector._finished(tuple(mamba_connector._resolved(op, rng)
                                          for op in gen.ops[:num_ops]))
    return Trace(blocks, size, 0, max_model_len, ops, None,
                 full_sequence_must_fit=rng.random() < 0.3,
                 watermark=0.0 if rng.random() < 0.8 else rng.choice((0.1, 0.2)),
                 events=observed, stats=observed, caching=False, mamba_mode=mode,
                 zeroing=True, note=f"profile {PROFILE}")


def _build_async(rng: random.Random, num_ops: int) -> Trace:
    """Under vLLM's asynchronous scheduler: the "async connector" profile's steps
    (`async_connector._AsyncConnected`: output placeholders, processed outputs, loads reported
    while other steps are in flight, aborts deferred past a step in flight and released, a
    `remove_skipped` before each finish) beside the Mamba group, no synchronous load failing at
    a block (two groups: vLLM raises) and every failed load whole."""
    size = rng.choice((1, 2, 4, 4, 8))
    blocks = rng.choice((rng.randint(6, 16), rng.randint(16, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(4, 12) * size + rng.randint(0, 3)))
    fit = rng.random() < 0.5
    budget = max(2, rng.choice((1, 2, 4, 8)) * size)
    in_flight = 2 * budget if rng.random() < 0.7 else \
        rng.choice((None, rng.randint(1, 4 * size)))
    watermark = 0.0 if rng.random() < 0.8 else rng.choice((0.01, 0.1, 0.2))
    observed = rng.random() < 0.3
    # (the shaper's block estimate takes the Mamba group as a window of one token: about a
    # block beside full attention's)
    shaper = _AsyncMamba(rng, size, 1, blocks, budget, max_model_len,
                         settles=rng.random() < 0.8, zeroing=True)
    shaper.chunk_retries = True
    for _ in range(20 * num_ops):  # steps make ops, but a stalled pool would not end
        if len(shaper.ops) >= num_ops or not shaper.step():
            break
    ops = tuple(replace(op, valid=0) if isinstance(op, Loaded) and op.valid > 0 else op
                for op in shaper.ops[:num_ops])
    return Trace(blocks, size, 0, max_model_len, ops, None, fit, in_flight, watermark,
                 async_scheduling=True, zeroing=True, events=observed, stats=observed,
                 caching=False, mamba_mode=rng.choice(("none", "all")),
                 note=f"profile {PROFILE}")


class _AsyncMamba(async_connector._AsyncConnected):
    failing_share = 0.0  # no synchronous load fails at a block beside two groups


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[mamba plain connector]", build, num_ops=200,
                           max_fuzz_ops=200)
