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
- no speculative Mamba blocks, no spec-decode padding, no asynchronous scheduling (the "mamba"
  profile's oracle models none of them beside the group).
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager import connector, mamba_connector
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "mamba plain connector"


def build(rng: random.Random, num_ops: int) -> Trace:
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


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator("kvmanager/5[mamba plain connector]", build, num_ops=200,
                           max_fuzz_ops=200)
