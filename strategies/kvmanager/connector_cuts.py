"""The "connector cuts" profile (`kvmanager/5[connector cuts]`): synchronous KV loads that fail at
a block, and the running requests vLLM's scheduler then cuts (`connector_ops.Cut`). Standard
library only.

vLLM 0.33.0's synchronous scheduler, "recompute" policy (`_update_requests_with_invalid_blocks`,
scheduler.py 3584-3682): a connector reports failed block ids with a step's output; every
running request holding one of them within its computed blocks goes back, the first in the
running queue to hold a block to that block's start, any other to its computed tokens before
the step (the block is computed again by the first), and the step's output is skipped. The
failed request's own cut is the trace's `loaded(rid, valid)` right after its synchronous
`connect`; the others' (a block shared through a prefix hit on the failed load, or its own
load's block that another request marked first) are `cut(rid, to)`. The manager is never
called for them: the blocks stay, cached, and the next steps compute the tokens again.

Block-level failures are refused by vLLM's scheduler for more than one KV cache group, so the
traces have full attention alone; the connector profile's requests (`connector._Connected`:
prompt families sharing prefixes, most admitted with external tokens, half of those loaded
asynchronously) with, after a synchronous load, its failure at a block in half (valid tokens
a few blocks, or none past the hit) and then cuts of one or two other requests (to a block
start or to any position, the lock step taking those that are at most the request's computed
tokens), now and then the failed request cut again. Tight pools, the whole-request check, a
watermark, KV events and stats in some; no spec-decode padding (vLLM maps no failure with
drafts yet).
"""

from __future__ import annotations

import random

from kvfuzz.strategies.kvmanager.connector import _Connected
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Cut, Loaded
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

PROFILE = "connector cuts"


def build(rng: random.Random, num_ops: int) -> Trace:
    size = rng.choice((1, 2, 4, 4, 8))
    blocks = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    observed = rng.random() < 0.3
    gen = _Cutting(rng, size, max_model_len)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(blocks, size, 0, max_model_len, tuple(gen.ops[:num_ops]),
                 full_sequence_must_fit=rng.random() < 0.3,
                 watermark=0.0 if rng.random() < 0.8 else rng.choice((0.1, 0.2)),
                 events=observed, stats=observed, note=f"profile {PROFILE}")


class _Cutting(_Connected):
    """The connector's requests; a synchronous load's failure and the cuts that come with it."""

    def arrive(self) -> None:
        before = len(self.ops)
        super().arrive()
        made = [op for op in self.ops[before:] if isinstance(op, Connect)]
        rng, size = self.rng, self.block_size
        if not made or made[0].load or not made[0].external or rng.random() < 0.5:
            return
        rid = made[0].rid
        # the failed block: a few blocks past the hit valid, or none (the lock step takes the
        # block at or past the local hit, below the load's end)
        self.ops.append(Loaded(rid, rng.choice((0, size, 2 * size, rng.randint(0, 4 * size)))))
        others = [other for other in self.live if other != rid]
        for other in rng.sample(others, min(len(others), rng.choice((0, 1, 1, 2)))):
            self.ops.append(Cut(other, self._to(rng)))
        if rng.random() < 0.15:  # its own block, marked first by another: back to its end
            self.ops.append(Cut(rid, self._to(rng)))

    def _to(self, rng: random.Random) -> int:
        """A block's start, or (the request's computed tokens before its step) any position."""
        size = self.block_size
        return rng.randint(0, 4) * size if rng.random() < 0.6 else rng.randint(0, 6 * size)


PROFILES = (PROFILE,)
GENERATOR = TraceGenerator(f"kvmanager/5[{PROFILE}]", build, num_ops=200, max_fuzz_ops=200)
