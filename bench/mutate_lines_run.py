"""What a trace would cost a mutant's child to know whether its lines ran (`reach.LinesRun`, the
fallback of `kvfuzz mutate`'s marker statement, `marking.py`): a target's seeded cases in this
process, untraced and under a LinesRun whose lines never run (a survivor's child: the trace on
to the end). Why the marker: on Python 3.11 any trace function runs every frame deoptimized.
Prints a table; asserts nothing.

    .venv/bin/python -m kvfuzz.bench.mutate_lines_run kvmanager --impl vllm.kvmanager \\
        --scope vllm.v1.core.single_type_kv_cache_manager [--cases 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvfuzz.fuzz.engine.mutation import worker
from kvfuzz.fuzz.engine.mutation.reach import LinesRun


def _never_called() -> None:
    """The watched code: no case runs it, so every Python call of the run reaches the filter."""


def measure(request: worker.Request, repeat: int) -> dict[str, float]:
    """Median seconds of the request's cases, by how they ran."""
    worker.plan(request)  # import and read the scopes; runs no case (`fresh`)
    worker._run_cases(worker._one(request))  # warmed up as a worker is
    times: dict[str, list[float]] = {"untraced": [], "LinesRun": []}
    for _ in range(repeat):
        for label, samples in times.items():
            began = time.perf_counter()
            if label == "untraced":
                worker._run_cases(request)
            else:
                with LinesRun([_never_called.__code__], 1, 1 << 30):
                    worker._run_cases(request)
            samples.append(time.perf_counter() - began)
    return {label: statistics.median(samples) for label, samples in times.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("--impl", required=True)
    parser.add_argument("--scope", action="append", default=[])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    request = worker.Request(args.target, args.impl, tuple(args.scope), ("*",), args.cases,
                             args.seed, 0, 0, trace=False, fresh=True)
    found = measure(request, args.repeat)
    print("| target | implementation | cases | untraced s | under LinesRun s | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    print(f"| {args.target} | {args.impl} | {args.cases} | {found['untraced']:.2f} | "
          f"{found['LinesRun']:.2f} | {found['LinesRun'] / found['untraced']:.2f}x |")


if __name__ == "__main__":
    main()
