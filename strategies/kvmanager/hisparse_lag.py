"""The "hisparse lag" profile (`kvmanager/5[hisparse lag]`, a stream of its own): the "hisparse"
profile's layout and requests, with HiSparse's worker reporting its write-backs late, out of
order and in parts (`Trace.hisparse_lag`), and the schedule of those reports. Standard library
only.

What a worker reports (vLLM 0.33.0, `HiSparseConnectorWorker.take_transfer_updates`, summed over
the ranks by `HiSparseConnectorWorkerMetadata.aggregate`, passed to the coordinator's
`update_spills(enqueued_counts, completed_counts)`): a transfer's id in `enqueued` once a rank
submits it (a step after the step that planned it, the same step on every rank), and in
`completed` once that rank's copy event has fired, that step or any later one. The coordinator
waits for as many completions as ranks reported it enqueued. So a transfer can be enqueued and
not completed for several steps, completed by one rank and not yet another (its count split
over reports), and, across transfers, complete in another order than planned (the released
worker reads each rank's events in submission order; the coordinator's contract is a mapping
and does not depend on it, and another worker need not keep it).

The schedule is drawn per transfer id from the trace's seed alone (`report_delays`), not from
the ops, so a trace replays its reports exactly whatever the implementation plans, and the
judge (`fuzz/kvmanager/hisparse_lag.py`) needs nothing else."""

from __future__ import annotations

import random
from dataclasses import replace

from kvfuzz.strategies.kvmanager.hisparse import build_hisparse
from kvfuzz.strategies.kvmanager.trace import Trace
from kvfuzz.strategies.sources import TraceGenerator

MAX_LAG = 16  # the most ops a report may come late (the codec's bound)
MAX_RANKS = 4  # the most ranks that write back (the codec's bound)


def build_lag(rng: random.Random, num_ops: int) -> Trace:
    """A "hisparse" trace's settings and ops, then (draws after them) its worker: reports up to
    1 to 6 ops late, 1 to 3 ranks each reporting every transfer (a tensor-parallel host writer
    each), and the seed of the per-transfer draws."""
    trace = build_hisparse(rng, num_ops)
    lag = (rng.choice((1, 2, 3, rng.randint(4, 6))), rng.choice((1, 2, 2, 3)),
           rng.randrange(2**31))
    return replace(trace, hisparse_lag=lag, note="profile hisparse lag")


def report_delays(lag: tuple[int, ...], transfer_id: int) -> tuple[int, tuple[int, ...]]:
    """(ops after the usual report that the enqueue is reported, and the same for each rank's
    completion, each at least the enqueue's): the usual report is at the end of the op after
    the one that planned the transfer (what the "hisparse" profile's worker does for every
    transfer, `lag` empty: (0, (0,)))."""
    if not lag:
        return 0, (0,)
    most, ranks, seed = lag
    rng = random.Random(f"{seed}:{transfer_id}")  # a str seed: the same draws in every process
    # on time half the time, a few ops late else; each rank's completion 0 to `most` later
    enqueue = 0 if rng.random() < 0.5 else rng.randint(1, most)
    completions = tuple(enqueue + (0 if rng.random() < 0.4 else rng.randint(1, most))
                        for _ in range(ranks))
    return enqueue, completions


PROFILES = ("hisparse lag",)
GENERATOR = TraceGenerator("kvmanager/5[hisparse lag]", build_lag, num_ops=200,
                           max_fuzz_ops=200)
