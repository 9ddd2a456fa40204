"""The "full last" profile (`kvmanager/5[full last]`, a stream of its own, a share of the mix since
2026-12-06, alone only before): full attention's KV-cache group ordered after the other group, as
vLLM 0.33.0 groups a model whose first layer is not full attention.
`kv_cache_planning.get_kv_cache_groups` buckets the layers by spec in the order the model registers
them (`_get_kv_cache_groups_uniform_page_size`, 484-507: a dict in first-appearance order, never
sorted), and nothing reorders `KVCacheConfig.kv_cache_groups` after it; the hybrid coordinator sorts
full attention first only in its own lookup list (`kv_cache_coordinator.py` 756-760). So Qwen3-Next
(linear attention in 3 of every 4 layers, layer 0 included) and Jamba build a Mamba group before
full attention, Gemma 3 (5 sliding layers, then a full one) its window groups first.

Half the traces are the "mamba" profile's shape (mode "none" or "all"), half "cross
attention"'s (an encoder-decoder whose cross-attention layers come first), both with caching
off (the field's contract, `codec._full_last`), with `Trace.full_last` set. The manager's
answers per group are then in its order, not the trace's: the judge reads them back
(`impl/kvmanager/driver.py`), and the oracle walks the groups in the manager's order to
allocate and free (`oracle/kvmanager/model.py`, `order`). Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import hybrid
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "full last"


def build(rng: random.Random, num_ops: int) -> Trace:
    shape = hybrid.build_mamba if rng.random() < 0.5 else hybrid.build_cross
    return replace(shape(rng, num_ops), full_last=True, note=f"profile {PROFILE}")


PROFILES = (PROFILE,)
# 100 ops a trace, as the newer streams
GENERATOR = TraceGenerator("kvmanager/5[full last]", build, num_ops=100, max_fuzz_ops=200)
