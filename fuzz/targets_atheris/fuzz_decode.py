"""Atheris target: paged alloc_decode, implementations vs the oracle, on structure-aware cases.

Run:     .venv/bin/python fuzz/targets_atheris/fuzz_decode.py [BYTES_CORPUS_DIR] -max_total_time=60
         (better: `kvfuzz fuzz decode --time 10m`, which seeds from corpus/, runs workers in
         parallel, minimises and deduplicates); pick implementations with
         KVFUZZ_IMPL=torch.vectorized,mypkg.mod:alloc_decode (default: every bundled one).
Replay:  a divergence is saved as JSON first ($KVFUZZ_FOUND, default corpus/), then raised:
         `kvfuzz replay corpus/decode-<id>.json --impl NAME`; libFuzzer's crash file replays with
         `.venv/bin/python fuzz/targets_atheris/fuzz_decode.py crash-<sha1>`.
"""

import sys

import atheris

from kvfuzz.fuzz.harness_env import paged_harness

HARNESS = paged_harness(atheris, "decode")


def TestOneInput(data: bytes) -> None:
    HARNESS.test_one_input(data)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
