"""CPU milliseconds a trace of a vLLM trace target's check in one process, as CI's tests run it
(`Target.check` in a loop: no worker, no transcript), against the released classes: each row's
same seeded traces, several rounds, the least and the median printed. Run it on two commits back
to back to compare what a change to the judge costs (docs/upstream-vllm.md, "Speed"):

    python -m kvfuzz.bench.trace_cpu [--traces N] [--rounds R] [--start I] [ROW ...]

A row is a `kvmanager` profile ("corners", "hisparse", ...), `blockpool` or `offload`.
Needs vLLM (`kvfuzz upstream fetch`)."""

from __future__ import annotations

import argparse
import gc
import statistics
import time

# The rows run when none is named: the manager's profiles that stress different parts of the
# check (the pool, a hybrid's groups, Mamba's align mode, a connector, HiSparse), then the
# block pool and an offloading policy, whose judges share the pool's state read.
DEFAULT_ROWS = ("corners", "hybrid sizes", "mamba align", "connector", "hisparse", "blockpool",
                "offload")
IMPLS = {"blockpool": "vllm.blockpool", "offload": "vllm.offload.lru"}


def traces_of(row: str, start: int, count: int):
    """(the target, its released implementation, `count` seeded traces of seed 0 from `start`)."""
    from kvfuzz.fuzz.targets import TARGETS

    if row in IMPLS:
        target = TARGETS[row]
        impl = target.catalogue.resolve(IMPLS[row])
        return target, impl, [target.generator.generate(0, i, [impl])
                              for i in range(start, start + count)]
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER
    from kvfuzz.impl.kvmanager import RELEASED

    impl, stream = KVMANAGER.catalogue.resolve(RELEASED), KVMANAGER.alone(row).generator
    return KVMANAGER, impl, [stream.generate(0, i) for i in range(start, start + count)]


def measure(target, impl, traces, rounds: int) -> list[float]:
    """CPU ms a trace of each round (every trace checked once a round; all must agree)."""
    target.check(traces[0], impl)  # warm-up: imports, first-call caches
    per_round = []
    for _ in range(rounds):
        began = time.process_time()
        for trace in traces:
            outcome = target.check(trace, impl)
            if outcome.status != "agree":
                raise RuntimeError(f"{trace.note or 'a trace'} did not agree: {outcome.status}")
        per_round.append((time.process_time() - began) * 1000 / len(traces))
    return per_round


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvfuzz.bench.trace_cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rows", nargs="*", default=list(DEFAULT_ROWS))
    parser.add_argument("--traces", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--start", type=int, default=0)
    args = parser.parse_args(argv)
    loaded = [(row, *traces_of(row, args.start, args.traces)) for row in args.rows]
    for _, _, impl, _ in loaded:  # what loading imported (torch, vLLM) out of the collector's
        impl.load()               # walks, as CI's test file and kvfuzz's workers do
    gc.collect()
    gc.freeze()
    print(f"{args.traces} traces a row (seed 0, from index {args.start}), {args.rounds} rounds, "
          f"one process, CPU time of `Target.check`\n")
    print("| row | least ms a trace | median | rounds |")
    print("|---|---:|---:|---|")
    for row, target, impl, traces in loaded:
        rounds = measure(target, impl, traces, args.rounds)
        print(f"| {row} | {min(rounds):.2f} | {statistics.median(rounds):.2f} | "
              f"{', '.join(f'{r:.2f}' for r in rounds)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
