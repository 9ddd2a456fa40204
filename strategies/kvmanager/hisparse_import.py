"""The "hisparse import" profile (`kvmanager/5[hisparse import]`, a stream of its own): the
"hisparse" profile's layout and requests, with most admissions made through a second KV
connector beside HiSparse's, whose external tokens are imported into the host pool (vLLM 0.33.0
validates NixlConnector and MooncakeStoreConnector there, `VllmConfig.__post_init__`; a
`MultiConnector` gives the request to the first connector with tokens, and HiSparse's own
reports none). Standard library only.

Each such admission is a `Connect` with an asynchronous load (the scheduler's
`WAITING_FOR_REMOTE_KVS` path, Nixl's only one), of up to a few blocks or the whole rest of the
prompt, then a `Loaded` a few ops later (done, or failed with a valid prefix or none). Short
external counts beside a host hit longer than the device groups' (a device eviction, a tight
device pool) are what tell line 497 of `kv_cache_manager.py` (the retained hit trimmed to
`cdiv(local + external, b)`) from its mutants."""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.hisparse import build_hisparse
from kvfuzz.strategies.kvmanager.trace import Arrive, Evict, Preempt, Schedule, Trace
from kvfuzz.strategies.sources import TraceGenerator


def build_import(rng: random.Random, num_ops: int) -> Trace:
    """A "hisparse" trace's settings and ops, then (one draw more, after them) its admissions
    turned into imports."""
    trace = build_hisparse(rng, num_ops)
    ops = _imports(random.Random(rng.random()), trace.ops, trace.block_size, trace.blocks)
    return replace(trace, ops=tuple(ops[:num_ops]), note="profile hisparse import")


def _imports(rng: random.Random, ops, size: int, blocks: int) -> list:
    """Two admissions in three (a request's first `schedule` since it arrived or was
    preempted) become a connector admission with an asynchronous load, reported 0 to 8 ops
    later: done in seven of ten, else failed with nothing or a few blocks valid. Half of them
    come after an eviction of about a third of the device blocks (`evict_blocks`): the host
    keeps hits the device groups lost, partly, which the import's admission trims (line 497's
    `|` needs a device hit left beside a longer host one: evicting 60% of the blocks left it
    alive on seed 0's first 200 of the mix, 30% kills it at index 99)."""
    out: list = []
    admitting: set[int] = set()  # requests whose next schedule is an admission
    due: list[tuple[int, int]] = []  # (position in out, rid): a load's report to insert
    for op in ops:
        if isinstance(op, (Arrive, Preempt)):
            admitting.add(op.rid)
        if isinstance(op, Schedule) and op.rid in admitting:
            admitting.discard(op.rid)
            if rng.random() < 2 / 3:
                external = rng.choice((rng.randint(1, 3) * size + rng.choice((-1, 0, 0, 1)),
                                       rng.randint(1, 12), 10**4))
                reserve = rng.choice((0, 0, 0, rng.randint(1, 4)))
                op = Connect(op.rid, op.chunk, max(1, external), True, reserve)
                if rng.random() < 0.5:
                    out.append(Evict(tuple(b for b in range(1, blocks) if rng.random() < 0.3)))
                due.append((len(out) + 1 + rng.randint(0, 8), op.rid))
        out.append(op)
        for at, rid in [d for d in due if d[0] <= len(out)]:
            due.remove((at, rid))
            valid = -1 if rng.random() < 0.7 else rng.choice((0, rng.randint(1, 3) * size))
            out.append(Loaded(rid, valid))
    return out + [Loaded(rid, -1) for _, rid in due]


PROFILES = ("hisparse import",)
GENERATOR = TraceGenerator("kvmanager/5[hisparse import]", build_import, num_ops=200,
                           max_fuzz_ops=200)
