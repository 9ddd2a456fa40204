"""Atheris target: the lazy-compaction allocator vs its oracle, on traces decoded from bytes.

Run:     .venv/bin/python fuzz/targets_atheris/fuzz_compaction.py -max_total_time=60
         (or `kvfuzz fuzz compaction --time 10m`); KVFUZZ_IMPL=compaction.eager,... picks the
         implementations (default compaction.lazy).
Replay:  a divergence is saved as a trace file first ($KVFUZZ_FOUND, default corpus/), then
         raised: `kvfuzz replay corpus/compaction-<id>.json --impl NAME`.
"""

import sys

import atheris

from kvfuzz.fuzz.compaction_fuzz import CompactionHarness
from kvfuzz.fuzz.harness_env import trace_harness

MODULES = ["fuzz.compaction_diff", "fuzz.compaction_shrink", "impl.compaction.allocator",
           "impl.compaction.pool", "impl.mutants.compaction"]
HARNESS = trace_harness(atheris, CompactionHarness, MODULES)


def TestOneInput(data: bytes) -> None:
    HARNESS.test_one_input(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
