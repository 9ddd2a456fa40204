"""The "prompt embeds" profile (`kvmanager/5[prompt embeds]`, a stream of its own): requests whose
prompt comes as embeddings (`prompt_embeds`; `Arrive.embeds`): vLLM holds their token ids as
zeros and folds a digest of each block's embeddings into its hash, so two such prompts share a
block exactly when their embeddings do, and never with a prompt of token ids (nor with each
other past the prompt, where the digest covers the embeddings there are). The corner
generator's requests (`generator._Generator`: prompt families cut around block boundaries),
60% of them given as embeddings (each position's embedding one value, the family's token), the
rest as the same tokens; full attention alone or (30%) beside a sliding window, one block size
hashed per block; KV events in half (their digests compared), hits reported in some, lookahead
hashing in a fifth; half of the requests (embedded or not) carry extra keys besides (LoRA, salt,
images: `extra_keys.with_keys`), joined with the embeddings' digest. Standard library only.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager import generator
from kvfuzz.strategies.kvmanager.extra_keys import with_keys
from kvfuzz.strategies.kvmanager.trace import Arrive, Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "prompt embeds"


def build(rng: random.Random, num_ops: int) -> Trace:
    block_size = rng.choice((1, 2, 4, 4, 8))
    window = 0 if rng.random() < 0.7 else rng.randint(2, 4 * block_size)
    blocks = rng.choice((rng.randint(4, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(4, 12) * block_size + rng.randint(0, 3)))
    events = rng.random() < 0.5
    settings = {"events": events, "report": events and rng.random() < 0.3,
                "stats": rng.random() < 0.3, "full_sequence_must_fit": rng.random() < 0.5,
                "retention": rng.choice((None, 0, 0)),
                "hash_lookahead": 1 if rng.random() < 0.2 else 0}
    gen = generator._Generator(rng, block_size, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    ops = tuple(replace(op, embeds=True) if isinstance(op, Arrive) and rng.random() < 0.6
                else op for op in gen.ops[:num_ops])
    ops = with_keys(rng, ops, block_size)
    return Trace(blocks, block_size, window, max_model_len, ops, **settings,
                 note=f"profile {PROFILE}")


PROFILES = (PROFILE,)
# 100 ops a trace (CI's 1,000 traces of a profile in about 15 s of CPU)
GENERATOR = TraceGenerator("kvmanager/5[prompt embeds]", build, num_ops=100, max_fuzz_ops=200)
