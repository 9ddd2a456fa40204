"""The "mtp" profile (`kvmanager/5[mtp]`, a stream of its own): multi-token prediction, whose
drafter reads `num_speculative_tokens` (k, 2 to 4) prompt tokens past a prefill chunk, so the
manager (`num_prefill_lookahead=k`) holds the last k - 1 computed tokens back from caching
(they may be re-prefilled). Draft slots: k on every allocation. In the engine's two settings:
its default, lookahead hashing over the same k tokens (`hash_lookahead`, the scheduler then
clearing `use_eagle`), in 60%; or lookahead hashes disabled, EAGLE's last-block drop instead
(`eagle`). Full attention alone or (40%) beside a sliding window of the same block size
(blocks of at least k tokens: vLLM refuses a smaller scheduler block with EAGLE), hashed per
block, or, beside a window with EAGLE's drop, in 40% per a hash block below the block size
(its partial tail cached over the finalized tokens alone); with EAGLE and a window, the
draft's group flagged apart in half. The corner generator's requests
(`generator._Generator`), half of them with extra keys (LoRA, salt, images:
`extra_keys.with_keys`); KV events in half. Standard library only.
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager import generator
from kvfuzz.strategies.kvmanager.extra_keys import with_keys
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "mtp"


def build(rng: random.Random, num_ops: int) -> Trace:
    k = rng.choice((2, 2, 3, 4))
    block_size = rng.choice([size for size in (2, 4, 4, 8) if size >= k])
    window = 0 if rng.random() < 0.6 else rng.randint(2, 4 * block_size)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(4, 12) * block_size + rng.randint(0, 3)))
    hashes_look_ahead = rng.random() < 0.6
    flagged = (rng.choice((0, 1)),) if window and not hashes_look_ahead and \
        rng.random() < 0.5 else ()
    events = rng.random() < 0.5
    settings = {"events": events, "report": events and rng.random() < 0.3,
                "stats": rng.random() < 0.3, "async_scheduling": rng.random() < 0.2,
                "lookahead": k, "full_sequence_must_fit": rng.random() < 0.5,
                "retention": rng.choice((None, 0, 0)), "prefill_lookahead": k,
                "hash_lookahead": k if hashes_look_ahead else 0,
                "eagle": not hashes_look_ahead, "eagle_groups": flagged}
    gen = generator._Generator(rng, block_size, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    ops = with_keys(rng, gen.ops[:num_ops], block_size)
    # beside a window, with EAGLE's drop, a hash block below the block size in 40% (drawn last:
    # the ops stay those of the same seed without it)
    if window and not hashes_look_ahead and rng.random() < 0.4:
        settings["hash_block_size"] = rng.choice([size for size in (1, 2, 4)
                                                  if size < block_size])
    return Trace(blocks, block_size, window, max_model_len, ops, **settings,
                 note=f"profile {PROFILE}")


PROFILES = (PROFILE,)
# 100 ops a trace (CI's 1,000 traces of a profile in about 15 s of CPU)
GENERATOR = TraceGenerator("kvmanager/5[mtp]", build, num_ops=100, max_fuzz_ops=200)
