"""The "connector" profile (`kvmanager/5[connector]`): a scheduler with a KV connector (P/D
disaggregation, an offloading tier) in front of the manager. Standard library only.

Requests over a few prompt families, most admitted with external tokens (`connect`): half of
those loaded asynchronously (the request waits, its blocks past the hit uncached, until
`loaded` reports the load done or failed, with a valid prefix or none; some with blocks
reserved for prefills in flight), the rest loaded with the step; external counts cut at, one
before and one after block boundaries, and past the prompt (all of it for a load). Full
attention alone, or (three traces in four) beside a sliding window or chunked-local group, of
one block size; seven in ten of those in two precisions, so vLLM records new blocks for zeroing
(`needs_kv_cache_zeroing`); tight pools, the whole-request check, a watermark, KV events and
stats in some. In four in ten, speculative decoding: admissions left with one token are padded
with placeholder drafts (`padded`). A prompt of one token loaded whole counts 0 computed tokens
after its load, and the scheduler looks it up again: half of the admissions after such a load
go through the connector again (a load again in half of those; since 2026-12-06, from draws of
their own).
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.generator import _Generator
from kvfuzz.strategies.kvmanager.trace import Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator


def build(rng: random.Random, num_ops: int, kind=None, profile: str = "connector") -> Trace:
    """A connector trace; `kind` the generator class (the deferred-frees profile's subclass)."""
    size = rng.choice((1, 2, 4, 4, 8))
    second = rng.choice(("none", "window", "window", "local"))
    window = rng.randint(2, 4 * size) if second == "window" else 0
    local = rng.randint(1, 4) * size if second == "local" else 0
    blocks = rng.choice((rng.randint(3, 12), rng.randint(12, 40)))
    max_model_len = rng.choice((1024, 1024, rng.randint(2, 12) * size + rng.randint(0, 3)))
    observed = rng.random() < 0.3
    gen = (kind or _Connected)(rng, size, max_model_len)
    gen.reconnects = profile == "connector"  # (the "deferred frees" profile's stay as they were)
    while len(gen.ops) < num_ops:
        gen.step()
    trace = Trace(blocks, size, window, max_model_len, tuple(gen.ops[:num_ops]),
                  rng.choice((None, 0)) if window else None,
                  full_sequence_must_fit=rng.random() < 0.3,
                  watermark=0.0 if rng.random() < 0.8 else rng.choice((0.1, 0.2)),
                  events=observed, stats=observed, local_chunk=local,
                  zeroing=second != "none" and rng.random() < 0.7, note=f"profile {profile}")
    # one draw more, after all the others: every trace keeps its ops and settings
    trace = some_groups(trace, random.Random(rng.random()))
    if profile != "connector":  # (the "deferred frees" profile's traces stay as they were)
        return trace
    # and one more for the spec-decode padding (2026-12-05): the traces it leaves unpadded
    # are as before it
    return padded(trace, random.Random(rng.random()))


def padded(trace: Trace, rng: random.Random) -> Trace:
    """In four traces in ten, a scheduler with speculative decoding: every `connect` and
    `schedule` carries its draft count `pad` (1 to 3), which pads an admission left with one
    token (a synchronous load of all but the last token, a resumption after a whole prompt
    loaded, a plain admission whose hit leaves one: `fuzz/kvmanager/padding.py`); in half of
    those the drafter has KV of its own (EAGLE-like: slots for `pad` draft tokens on every
    allocation), in the other half none (n-gram-like: no lookahead slots)."""
    if rng.random() >= 0.4:
        return trace
    pad = rng.randint(1, 3)
    ops = tuple(replace(op, pad=pad) if isinstance(op, (Connect, Schedule)) else op
                for op in trace.ops)
    return replace(trace, ops=ops, lookahead=pad if rng.random() < 0.5 else 0)


def some_groups(trace: Trace, rng: random.Random) -> Trace:
    """Where blocks are zeroed, three asynchronous loads in ten write some groups only (the
    connector's `get_loaded_kv_cache_group_ids`: the full-attention group, the second, or
    none), so the other groups' external blocks are zeroed."""
    if not trace.zeroing:
        return trace
    ops = tuple(replace(op, written=rng.choice((0, 1, 2)))
                if isinstance(op, Connect) and op.load and rng.random() < 0.3 else op
                for op in trace.ops)
    return replace(trace, ops=ops)


class _Connected(_Generator):
    """The corner generator's requests, admitted through a connector most of the time."""

    reconnects = False  # a one-token prompt loaded whole admitted through the connector again

    def __init__(self, rng: random.Random, block_size: int, max_model_len: int):
        super().__init__(rng, block_size, max_model_len)
        self.loading: list[int] = []
        # Draws of its own (since 2026-12-06), so the traces with no prompt of one token loaded
        # keep their ops: which of those are admitted through the connector again, and how
        self.ones = random.Random(f"{block_size} {max_model_len}")
        self.single: set[int] = set()  # the requests whose prompt is one token

    def step(self) -> None:
        live = len(self.live)
        actions = [(self.arrive, 2.0 if live < 6 else 0.3), (self.schedule, 3.0 if live else 0),
                   (self.decode, 2.0 if live else 0), (self.loaded, 3.0 if self.loading else 0),
                   (self.preempt, 0.3 if live else 0),
                   (self.finish, 0.3 + 0.3 * live if live else 0), (self.evict, 0.2),
                   (self.reset, 0.1)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def arrive(self) -> None:
        before = len(self.ops)
        super().arrive()
        rng, bs = self.rng, self.block_size
        if len(self.ops[before].tokens) == 1:
            self.single.add(self.next_rid)
        if rng.random() < 0.2:
            return
        # a connector admission in place of the plain one (or after the arrival)
        del self.ops[before + 1:]
        rid = self.next_rid
        load = rng.random() < 0.5
        external = rng.choice((rng.randint(1, 3) * bs + rng.choice((-1, 0, 0, 1)),
                               rng.randint(1, 12), 10**4))
        reserve = rng.choice((0, 0, 0, rng.randint(1, 6))) if load else 0
        self.ops.append(Connect(rid, self.chunk(), max(0, external), load, reserve))
        if load:
            self.loading.append(rid)

    def loaded(self) -> None:
        rng = self.rng
        rid = rng.choice(self.loading)
        self.loading.remove(rid)
        valid = -1 if rng.random() < 0.6 else rng.choice((0, rng.randint(1, 3) * self.block_size))
        self.ops.append(Loaded(rid, valid))
        if rng.random() < 0.7:  # mostly scheduled soon after
            chunk, ones = self.chunk(), self.ones
            if self.reconnects and rid in self.single and ones.random() < 0.5:
                # one token, loaded whole, has 0 computed tokens: the scheduler looks it up and
                # asks the connector again, which may answer a load of it again
                load = ones.random() < 0.5
                self.ops.append(Connect(rid, chunk, ones.choice((1, 10**4)), load))
                if load:
                    self.loading.append(rid)
                return
            self.ops.append(Schedule(rid, chunk))


PROFILES = ("connector",)
GENERATOR = TraceGenerator("kvmanager/5[connector]", build, num_ops=200, max_fuzz_ops=200)
