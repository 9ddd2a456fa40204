"""Host reads and time of one urgent flush over N interior holes: the batched commit (PR 34066)
against the per-page `.item()` commit from before it. Prints a table; asserts nothing.

    .venv/bin/python -m kvfuzz.bench.compaction_syncs [--repeat 5] [--epp 256] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from kvfuzz.impl.compaction import IMPLEMENTATIONS
from kvfuzz.impl.host_sync import count_host_syncs
from kvfuzz.impl.registry import resolve
from kvfuzz.strategies.compaction.trace import Params

HOLES = (64, 128, 256, 512, 1024, 2048, 4096)


def _prepared(impl: str, num_holes: int, epp: int, device: str):
    """N holes at the bottom of the span, N live pages above them: the flush moves all N."""
    params = Params(total_bytes=epp * (2 * num_holes + 2), epp_up=epp, epp_down=epp,
                    sink_bytes=epp, two_ended=False, move_cap=4096)
    allocator = resolve("compaction", IMPLEMENTATIONS, impl).load()(params, device)
    vids = allocator.alloc("up", 2 * num_holes)
    allocator.free("up", vids[:num_holes])
    return allocator.pools["up"]


def measure(impl: str, num_holes: int, epp: int, repeat: int,
            device: str = "cpu") -> tuple[int, int, float]:
    """(moves, host reads, median milliseconds); timing runs without the counter's overhead."""
    pool = _prepared(impl, num_holes, epp, device)
    with count_host_syncs() as syncs:
        moves = pool.flush(urgent=True)
    times = []
    for _ in range(repeat):
        pool = _prepared(impl, num_holes, epp, device)
        _settle(device)
        start = time.perf_counter()
        pool.flush(urgent=True)
        _settle(device)  # on a GPU the time includes the queued copy and remap
        times.append((time.perf_counter() - start) * 1000)
    return moves, syncs.total, statistics.median(times)


def _settle(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--epp", type=int, default=256, help="bytes per page")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1 by default: on a busy machine idle OpenMP "
                             "workers add tens of ms to any copy above the grain size)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda / cuda:N")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"urgent flush of N interior holes, one grow-up pool, {args.epp} bytes per page, "
          f"{args.device}, {args.threads} CPU thread(s), median of {args.repeat}")
    print(f"{'':>13} | {'batched (lazy)':^19} | {'before PR 34066':^19}")
    print(f"{'holes':>6} {'moves':>6} | {'host reads':>10} {'ms':>8} | "
          f"{'host reads':>10} {'ms':>8}")
    for num_holes in HOLES:
        moves, reads, ms = measure("compaction.lazy", num_holes, args.epp, args.repeat,
                                   args.device)
        _, reads_before, ms_before = measure("compaction.before", num_holes, args.epp,
                                             args.repeat, args.device)
        print(f"{num_holes:>6} {moves:>6} | {reads:>10} {ms:>8.2f} | {reads_before:>10} "
              f"{ms_before:>8.2f}")


if __name__ == "__main__":
    main()
