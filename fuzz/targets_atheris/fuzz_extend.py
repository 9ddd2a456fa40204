"""Atheris target: paged alloc_extend, implementations vs the oracle, on structure-aware cases.

Run:     .venv/bin/python fuzz/targets_atheris/fuzz_extend.py [BYTES_CORPUS_DIR] -max_total_time=60
         (better: `kvfuzz fuzz extend --time 10m`, which seeds from corpus/, runs workers in
         parallel, minimises and deduplicates); pick implementations with
         KVFUZZ_IMPL=torch.vectorized,mypkg.mod:alloc_extend (default: every bundled one).
Replay:  a divergence is saved as JSON first ($KVFUZZ_FOUND, default corpus/), then raised:
         `kvfuzz replay corpus/extend-<id>.json --impl NAME`; libFuzzer's crash file replays with
         `.venv/bin/python fuzz/targets_atheris/fuzz_extend.py crash-<sha1>`.
"""

import sys

import atheris

from kvfuzz.fuzz.harness_env import paged_harness

HARNESS = paged_harness(atheris, "extend")


def TestOneInput(data: bytes) -> None:
    HARNESS.test_one_input(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
