"""Atheris target: allocator classes vs the oracle, in lockstep, on traces decoded from bytes.

Run:     .venv/bin/python fuzz/targets_atheris/fuzz_allocator.py -max_total_time=60
         (or `kvfuzz fuzz allocator --time 10m`); pick implementations with
         KVFUZZ_IMPL=mutant.allocator.lost_at_merge,... (default allocator.torch).
Replay:  a divergence is saved as a trace file first ($KVFUZZ_FOUND, default corpus/), then
         raised: `kvfuzz replay corpus/allocator-<id>.json --impl NAME`.
"""

import sys

import atheris

from kvfuzz.fuzz.allocator_fuzz import AllocatorHarness
from kvfuzz.fuzz.harness_env import trace_harness

MODULES = ["fuzz.allocator_diff", "fuzz.allocator_shrink", "impl.allocator_driver",
           "impl.allocator_registry", "impl.paged_allocator", "impl.mutants.allocator"]
HARNESS = trace_harness(atheris, AllocatorHarness, MODULES)


def TestOneInput(data: bytes) -> None:
    HARNESS.test_one_input(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
