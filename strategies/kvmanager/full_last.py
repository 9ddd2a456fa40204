"""The "full last" profile (`kvmanager/5[full last]`, a stream of its own, a share of the mix since
2026-12-06, alone only before): full attention's KV-cache group ordered after the other group, as
vLLM 0.33.0 groups a model whose first layer is not full attention.
`kv_cache_planning.get_kv_cache_groups` buckets the layers by spec in the order the model registers
them (`_get_kv_cache_groups_uniform_page_size`, 484-507: a dict in first-appearance order, never
sorted), and nothing reorders `KVCacheConfig.kv_cache_groups` after it; the hybrid coordinator sorts
full attention first only in its own lookup list (`kv_cache_coordinator.py` 756-760). So Qwen3-Next
(linear attention in 3 of every 4 layers, layer 0 included) and Jamba build a Mamba group before
full attention, Gemma 3 (5 sliding layers, then a full one) its window groups first.

Three kinds, by the first draw: a quarter the "mamba" profile's shape (mode "none" or "all"), a
quarter Mamba "align" with prefix caching over long prompts (below), half "cross attention"'s
(an encoder-decoder whose cross-attention layers come first); the first two caching off (the
field's contract, `codec._full_last`), each with `Trace.full_last` set. The manager's answers
per group are then in its order, not the trace's: the judge reads them back
(`impl/kvmanager/driver.py`), the oracle walks the groups in the manager's order to allocate
and free (`oracle/kvmanager/model.py`, `order`), and the reduced mode of "align" reads the
pool's group ids in the trace's (`fuzz/kvmanager/align_order.py`). (Until 2026-12-06 the first
draw's half below 0.5 was all "mamba": the "align" quarter took [0.25, 0.5) of it, so every
other index's trace is as it was, cross attention's top-up in CI included.)

The "align" kind (`build_align`) is there for the connector's lookup
(`get_computed_blocks_for_connector`) with the Mamba group first: where both groups hit
exactly as deep, past 256 tokens, its `min(per_group_hits) < num_local` differs from an
identity test (`is not`, a catalogue mutant of line 378) only because `min` returns the first
of equal values, the Mamba group's, and CPython shares ints up to 256 only. Such a hit needs a
request whose prompt ends on a depth past 256 (its last state cached there) and a later one
that shares that prompt and runs past it: the prompts are cut from one or two long prompt
families at a few depths past 256 on the hash grid, half with no tokens of their own after the
cut. The Mamba states are as the "mamba align" profile leaves them (`hybrid.build_mamba_align`:
retention off in most, a prefill checkpoint block in 85%, speculative blocks in 70%), blocks of
8 or 16 tokens (fewer pool blocks to read after every op), a pool of two to three long prompts.
Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import hybrid
from kvfuzz.strategies.kvmanager.generator import VOCAB, _Generator
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "full last"
SHARED_INTS = 256  # CPython's small ints end here: equal hits past it are distinct objects


def build(rng: random.Random, num_ops: int) -> Trace:
    draw = rng.random()
    shape = (hybrid.build_mamba if draw < 0.25 else build_align) if draw < 0.5 else \
        hybrid.build_cross
    return replace(shape(rng, num_ops), full_last=True, note=f"profile {PROFILE}")


class _Long(_Generator):
    """The corner generator's requests (`generator._Generator`) over long prompt families:
    most prompts cut at one of a few depths past `SHARED_INTS` on the hash grid, half with no
    tokens of their own after the cut (a later request sharing the cut and running past it
    hits both groups there), the rest anywhere."""

    def __init__(self, rng: random.Random, block_size: int, hash_size: int,
                 max_model_len: int, longest: int):
        super().__init__(rng, block_size, max_model_len)
        self.families = [[rng.randrange(VOCAB) for _ in range(longest)]
                         for _ in range(rng.randint(1, 2))]
        grid = range((SHARED_INTS // hash_size + 1) * hash_size, longest + 1, hash_size)
        on_blocks = [depth for depth in grid if depth % block_size == 0]
        self.depths = rng.sample(on_blocks, min(2, len(on_blocks))) + [rng.choice(grid)]

    def arrive(self) -> None:
        rng, size = self.rng, self.block_size
        base = rng.choice(self.families)
        cut = rng.choice(self.depths) if rng.random() < 0.8 else rng.randint(1, len(base))
        tail = [] if rng.random() < 0.5 else [rng.randrange(VOCAB)
                                              for _ in range(rng.randint(1, 2 * size))]
        tokens = (base[:cut] + tail)[:max(1, self.max_len - 1)]
        self.next_rid += 1
        self.live.append(self.next_rid)
        self.ops.append(Arrive(self.next_rid, tuple(tokens), rng.random() < 0.05))
        if rng.random() < 0.7:
            self.ops.append(Schedule(self.next_rid, self.chunk()))


def build_align(rng: random.Random, num_ops: int) -> Trace:
    """Full attention beside a Mamba group in mode "align", prefix caching on, prompts of up to
    480 tokens (`_Long`), the settings drawn as `hybrid.build_mamba_align` draws them."""
    size = rng.choice((8, 16))
    hashed = rng.choice((2, 4, size)) if rng.random() < 0.5 else size
    longest = rng.randint(SHARED_INTS + 2 * size, 480)
    blocks = -(-longest // size) * rng.randint(2, 3) + rng.randint(4, 12)
    gen = _Long(rng, size, hashed, 1024, longest)
    while len(gen.ops) < num_ops:
        gen.step()
    align = hybrid.build_mamba_align(rng, 0)  # its settings' draws (no ops)
    checkpoint = align.mamba_checkpoint and rng.choice((hashed, 1))
    return replace(align, blocks=blocks, block_size=size, max_model_len=1024,
                   ops=tuple(gen.ops[:num_ops]), retention=rng.choice((None, None, 0)),
                   hash_block_size=hashed if hashed != size else 0,
                   mamba_checkpoint=checkpoint)


PROFILES = (PROFILE,)
# 100 ops a trace, as the newer streams
GENERATOR = TraceGenerator("kvmanager/5[full last]", build, num_ops=100, max_fuzz_ops=200)
